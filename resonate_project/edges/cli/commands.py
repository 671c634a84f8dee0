"""The protocol commands: promises, tasks, schedules, ``invoke`` and the call ``tree``."""

from __future__ import annotations

import argparse
import base64
import json
from typing import Any

from resonate_project.core.present import decoded_text
from resonate_project.core.tags import BRANCH, DELAY, ORIGIN, PARENT, SCOPE, TARGET, TIMER
from resonate_project.edges.cli.output import (
    page_lines,
    promise_lines,
    schedule_lines,
    search_data,
    task_lines,
    value_of,
    when,
)
from resonate_project.edges.cli.transport import (
    PAGE,
    CliError,
    Ctx,
)

# --- promises -----------------------------------------------------------------------------------


def promise_get(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request("promise.get", {"id": args.id})
    ctx.show(data, lambda: promise_lines(data["promise"], ctx.now))


def promise_create(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request(
        "promise.create",
        {
            "id": args.id,
            "timeoutAt": ctx.now + args.timeout,
            "param": value_of(args.data, args.header),
            "tags": dict(args.tag),
        },
    )
    ctx.show(data, lambda: promise_lines(data["promise"], ctx.now))


def promise_settle(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request(
        "promise.settle",
        {"id": args.id, "state": args.state, "value": value_of(args.data, args.header)},
    )
    ctx.show(data, lambda: promise_lines(data["promise"], ctx.now))


def promise_search(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request("promise.search", search_data(args, state=args.state, tags=dict(args.tag)))
    rows = [
        [p["id"], p["state"], when(p["createdAt"]), when(p["timeoutAt"]), when(p.get("settledAt"))]
        for p in data["promises"]
    ]
    headers = ["ID", "STATE", "CREATED", "TIMEOUT", "SETTLED"]
    ctx.show(data, lambda: page_lines("promises", headers, rows, data.get("cursor")))


# --- tasks --------------------------------------------------------------------------------------


def task_get(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request("task.get", {"id": args.id})
    ctx.show(data, lambda: task_lines(data["task"]))


def task_search(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request("task.search", search_data(args, state=args.state))
    rows = [
        [t["id"], t["state"], str(t["version"]), t.get("pid", "-"), str(t["resumes"])]
        for t in data["tasks"]
    ]
    headers = ["ID", "STATE", "VERSION", "PID", "RESUMES"]
    ctx.show(data, lambda: page_lines("tasks", headers, rows, data.get("cursor")))


def task_halt(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request("task.halt", {"id": args.id})
    ctx.show(data, lambda: [f"halted task {args.id}"])


def task_continue(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request("task.continue", {"id": args.id})
    ctx.show(data, lambda: [f"continued task {args.id}: pending again"])


# --- schedules ----------------------------------------------------------------------------------


def schedule_get(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request("schedule.get", {"id": args.id})
    ctx.show(data, lambda: schedule_lines(data["schedule"], ctx.now))


def schedule_create(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request(
        "schedule.create",
        {
            "id": args.id,
            "cron": args.cron,
            "promiseId": args.promise_id,
            "promiseTimeout": args.promise_timeout,
            "promiseParam": value_of(args.promise_data, args.promise_header),
            "promiseTags": dict(args.promise_tag),
        },
    )
    ctx.show(data, lambda: schedule_lines(data["schedule"], ctx.now))


def schedule_delete(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request("schedule.delete", {"id": args.id})
    ctx.show(data, lambda: [f"deleted schedule {args.id}"])


def schedule_search(ctx: Ctx, args: argparse.Namespace) -> None:
    data = ctx.request("schedule.search", search_data(args, tags=dict(args.tag)))
    rows = [[s["id"], s["cron"], when(s["nextRunAt"]), s["promiseId"]] for s in data["schedules"]]
    headers = ["ID", "CRON", "NEXT RUN", "PROMISE ID"]
    ctx.show(data, lambda: page_lines("schedules", headers, rows, data.get("cursor")))


# --- invoke and tree ----------------------------------------------------------------------------


def invoke_args(args: argparse.Namespace) -> list[Any]:
    if args.json_args is not None:
        if args.arg:
            raise CliError("give either --arg or --json-args, not both")
        try:
            parsed = json.loads(args.json_args)
        except ValueError as exc:
            raise CliError(f"--json-args is not JSON: {exc}") from exc
        if not isinstance(parsed, list):
            raise CliError("--json-args must be a JSON array")
        return parsed
    values: list[Any] = []
    for arg in args.arg:
        try:
            values.append(json.loads(arg))
        except ValueError:
            values.append(arg)
    return values


def invoke(ctx: Ctx, args: argparse.Namespace) -> None:
    """A root invocation as the SDKs create one: the function call as base64 JSON, the root's
    lineage tags, and the target that makes the server create and dispatch its task."""
    call = {"func": args.func, "args": invoke_args(args), "version": args.version}
    tags = {ORIGIN: args.id, BRANCH: args.id, PARENT: args.id, SCOPE: "global", TARGET: args.target}
    if args.delay is not None:
        tags[DELAY] = str(ctx.now + args.delay)
    data = ctx.request(
        "promise.create",
        {
            "id": args.id,
            "timeoutAt": ctx.now + args.timeout,
            "param": {"data": base64.b64encode(json.dumps(call).encode()).decode()},
            "tags": tags,
        },
    )
    ctx.show(
        data,
        lambda: [f"invoked {args.func} as {args.id}", *promise_lines(data["promise"], ctx.now)],
    )


def children(ctx: Ctx, parent: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        query: dict[str, Any] = {"tags": {PARENT: parent}, "limit": PAGE}
        if cursor:
            query["cursor"] = cursor
        data = ctx.request("promise.search", query)
        found += [p for p in data["promises"] if p["id"] != parent]  # a root is its own parent
        cursor = data.get("cursor")
        if not cursor:
            return sorted(found, key=lambda p: (p["createdAt"], p["id"]))


def subtree(ctx: Ctx, promise: dict[str, Any], seen: set[str]) -> dict[str, Any]:
    seen.add(promise["id"])
    kids = [c for c in children(ctx, promise["id"]) if c["id"] not in seen]
    return {"promise": promise, "children": [subtree(ctx, c, seen) for c in kids]}


def label(p: dict[str, Any]) -> str:
    tags = p["tags"]
    func = ""
    try:
        call = json.loads(decoded_text(p["param"].get("data")) or "")
        func = call.get("func", "") if isinstance(call, dict) else ""
    except ValueError:
        pass
    kind = ""
    if tags.get(TIMER) == "true":
        kind = "sleep"
    elif tags.get(SCOPE) in ("global", "local"):
        kind = " ".join(filter(None, ["rpc" if tags[SCOPE] == "global" else "run", func]))
    return " ".join(filter(None, [p["id"], f"[{p['state']}]", kind]))


def tree_lines(
    node: dict[str, Any], prefix: str = "", last: bool = True, root: bool = True
) -> list[str]:
    connector = "" if root else ("└── " if last else "├── ")
    lines = [f"{prefix}{connector}{label(node['promise'])}"]
    inner = prefix if root else prefix + ("    " if last else "│   ")
    kids = node["children"]
    for i, kid in enumerate(kids):
        lines += tree_lines(kid, inner, i == len(kids) - 1, root=False)
    return lines


def tree(ctx: Ctx, args: argparse.Namespace) -> None:
    root = ctx.request("promise.get", {"id": args.id})["promise"]
    data = subtree(ctx, root, set())
    ctx.show(data, lambda: tree_lines(data))
