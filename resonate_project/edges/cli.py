"""``manage.py resonate``: promises, tasks and schedules from the command line, shaped like the
reference server's CLI.

Every subcommand sends protocol requests (the kinds marked ``cli`` in ``edges.kinds``): by
default to the local database through the envelope's own path (``local`` below), or with
``--server URL`` to a running server as envelopes over HTTP (``--token`` adds
``Authorization: Bearer``). Output is
human-readable (aligned columns, UTC datetimes, values decoded from base64 when they are text);
``--json`` prints the protocol's data as JSON instead. The clock is read once per command.

    resonate promises get|create|resolve|reject|cancel|search
    resonate tasks get|search|halt|continue
    resonate schedules get|create|delete|search
    resonate invoke ID --func F [--arg A ...] [--json-args '[...]'] [--timeout 1h]
                       [--target poll://any@default] [--delay 5s]
    resonate tree ID
    resonate credentials create NAME [--prefix P] [--group G ...] [--admin] | revoke NAME | list
    resonate worker [--queue Q ...] [--concurrency N] [--backend ALIAS] [--grace SECONDS]

``worker`` is not a protocol request: it runs the calls enqueued through Django's Tasks
framework (``tasks_app.worker``), on the local database only.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import re
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from resonate_project import USER_AGENT
from resonate_project.core import clock
from resonate_project.core.present import decoded_text, iso, relative, span
from resonate_project.core.protocol import PROMISE_STATES, TASK_STATES, Response
from resonate_project.core.tags import BRANCH, DELAY, ORIGIN, PARENT, SCOPE, TARGET, TIMER

# With --server nothing here needs Django: manage.py runs such a call through main_remote,
# without setting Django up (a quarter of the CPU a call costs otherwise; bench/cli_cpu.py). So
# what the local database needs (the typed services, the models, the Tasks worker) is imported
# where a local command runs, never at the top of this module.

DEFAULT_TARGET = "poll://any@default"
PAGE = 1000  # promises per search while walking a call tree (the protocol's maximum)
HTTP_TIMEOUT_S = 30.0
SETTLE_STATES = {"resolve": "resolved", "reject": "rejected", "cancel": "rejected_canceled"}

Send = Callable[[str, dict[str, Any]], Response]
Out = Callable[[str], Any]


class CliError(Exception):
    """A refusal or an unreachable server, reported as the command's error."""


# --- arguments ----------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration(text: str) -> int:
    """``1h``, ``30m``, ``10s``, ``500ms``, ``2d``, or a sum such as ``1h30m``; in ms."""
    if not re.fullmatch(r"(?:\d+(?:ms|s|m|h|d))+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 1h, 30m, 10s, 500ms")
    return sum(int(n) * _UNIT_MS[unit] for n, unit in _DURATION.findall(text))


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", metavar="URL", help="a running server (default: local DB)")
    common.add_argument("--token", help="bearer token sent to --server")
    common.add_argument("--json", action="store_true", help="print the protocol's data as JSON")

    def command(group: Any, name: str, run: Callable[..., None], help: str) -> Any:
        sub = group.add_parser(name, parents=[common], help=help, description=help)
        sub.set_defaults(run=run)
        return sub

    def value_options(sub: Any, prefix: str = "") -> None:
        sub.add_argument(f"--{prefix}data", help="value data (text, sent base64-encoded)")
        pairs(sub, f"--{prefix}header", "a value header (repeatable)")

    def pairs(sub: Any, flag: str, help: str) -> None:
        """A repeatable ``K=V`` option (tags, headers)."""
        sub.add_argument(
            flag, type=key_value, action="append", default=[], metavar="K=V", help=help
        )

    def page_options(sub: Any) -> None:
        sub.add_argument("--limit", type=int, help="results per page (default 100)")
        sub.add_argument("--cursor", help="continue after this id (printed by the last page)")

    groups = parser.add_subparsers(dest="group", required=True)

    promises = groups.add_parser("promises", help="durable promises").add_subparsers(
        dest="action", required=True
    )
    command(promises, "get", promise_get, "show a promise").add_argument("id")
    sub = command(promises, "create", promise_create, "create a promise (idempotent by id)")
    sub.add_argument("id")
    sub.add_argument("--timeout", type=duration, required=True, help="e.g. 1h, 30m, 10s")
    value_options(sub)
    pairs(sub, "--tag", "a tag, e.g. resonate:target=poll://any@default (repeatable)")
    for name, state in SETTLE_STATES.items():
        sub = command(promises, name, promise_settle, f"settle a promise as {state}")
        sub.add_argument("id")
        value_options(sub)
        sub.set_defaults(state=state)
    sub = command(promises, "search", promise_search, "list promises by state and tags")
    sub.add_argument("--state", choices=PROMISE_STATES)
    pairs(sub, "--tag", "only promises with this tag (repeatable: all of them)")
    page_options(sub)

    tasks = groups.add_parser("tasks", help="tasks").add_subparsers(dest="action", required=True)
    command(tasks, "get", task_get, "show a task").add_argument("id")
    sub = command(tasks, "search", task_search, "list tasks by state")
    sub.add_argument("--state", choices=TASK_STATES)
    page_options(sub)
    command(tasks, "halt", task_halt, "take a task out of circulation").add_argument("id")
    command(tasks, "continue", task_continue, "put a halted task back").add_argument("id")

    schedules = groups.add_parser("schedules", help="schedules").add_subparsers(
        dest="action", required=True
    )
    command(schedules, "get", schedule_get, "show a schedule").add_argument("id")
    sub = command(schedules, "create", schedule_create, "create a schedule (idempotent by id)")
    sub.add_argument("id")
    sub.add_argument("--cron", required=True, help="5 fields, or 6 with seconds first; UTC")
    sub.add_argument(
        "--promise-id", required=True, help="occurrence id template: {{.id}}, {{.timestamp}}"
    )
    sub.add_argument("--promise-timeout", type=duration, required=True, help="e.g. 1h")
    value_options(sub, prefix="promise-")
    pairs(sub, "--promise-tag", "a tag of every occurrence promise (repeatable)")
    command(schedules, "delete", schedule_delete, "delete a schedule").add_argument("id")
    sub = command(schedules, "search", schedule_search, "list schedules by promise tags")
    pairs(sub, "--tag", "only schedules whose promises carry this tag (repeatable)")
    page_options(sub)

    sub = command(groups, "invoke", invoke, "start a function run: a promise with a target")
    sub.add_argument("id")
    sub.add_argument("--func", required=True, help="the registered function's name")
    sub.add_argument(
        "--arg", action="append", default=[], help="an argument (JSON if it parses, else text)"
    )
    sub.add_argument("--json-args", metavar="JSON", help="all arguments as one JSON array")
    sub.add_argument("--version", type=int, default=1, help="function version (default 1)")
    sub.add_argument("--timeout", type=duration, default=duration("1h"), help="default 1h")
    sub.add_argument("--target", default=DEFAULT_TARGET, help=f"default {DEFAULT_TARGET}")
    sub.add_argument("--delay", type=duration, help="dispatch no sooner than this from now")

    command(
        groups, "tree", tree, "the call tree under a promise (by resonate:parent)"
    ).add_argument("id")

    creds = groups.add_parser(
        "credentials", help="service credentials (local database only)"
    ).add_subparsers(dest="action", required=True)
    help = "create a credential; its token is printed once, alone on the last line"
    sub = creds.add_parser("create", help=help, description=help)
    sub.add_argument("name")
    sub.add_argument("--prefix", default="", help="every id it names must start with this")
    sub.add_argument(
        "--group",
        action="append",
        default=[],
        help="a poll group it may stream (repeatable; none: any group)",
    )
    sub.add_argument(
        "--push-host",
        action="append",
        default=[],
        help="a host (or *.domain) its http(s) addresses may name (repeatable; none: any host, "
        "or none at all with --group)",
    )
    sub.add_argument("--admin", action="store_true", help="may do anything, debug included")
    sub.set_defaults(run=credentials_create)
    help = "revoke a credential (requests with it answer 401 from now on)"
    sub = creds.add_parser("revoke", help=help, description=help)
    sub.add_argument("name")
    sub.set_defaults(run=credentials_revoke)
    help = "list credentials (never their tokens)"
    creds.add_parser("list", help=help, description=help).set_defaults(run=credentials_list)

    help = "run calls enqueued through the Django Tasks backend (until SIGTERM)"
    sub = groups.add_parser("worker", help=help, description=help)
    sub.add_argument(
        "--queue",
        action="append",
        default=[],
        help="a queue to serve (repeatable; default: the backend's QUEUES, else default)",
    )
    sub.add_argument("--concurrency", type=int, default=1, help="calls run at once (threads)")
    sub.add_argument("--backend", default="default", help="the TASKS alias (default: default)")
    sub.add_argument(
        "--grace", type=float, default=30.0, help="seconds running calls get after SIGTERM"
    )
    sub.set_defaults(run=worker)

    help = "delete settled work older than the retention window (local database only)"
    sub = groups.add_parser("prune", help=help, description=help)
    sub.add_argument(
        "--older-than",
        type=duration,
        help="keep settled trees this long, e.g. 30d (default: the RETENTION_MS setting)",
    )
    sub.add_argument(
        "--django-tasks-older-than",
        type=duration,
        help="the same for trees holding a Django task (default: RETENTION_DJANGO_TASKS_MS)",
    )
    sub.add_argument(
        "--dead-letters-older-than",
        type=duration,
        help="the same for dead-lettered and undeliverable messages "
        "(default: RETENTION_DEAD_LETTERS_MS)",
    )
    sub.add_argument(
        "--dry-run", action="store_true", help="count what would be deleted; delete nothing"
    )
    sub.add_argument(
        "--pace",
        type=float,
        default=1.0,
        help="after each pass wait this many times as long as it took (default 1: prune half "
        "the time, so requests keep the database; 0: as fast as it can)",
    )
    sub.add_argument("--json", action="store_true", help="print the counts as JSON")
    sub.set_defaults(run=prune)


# --- transport ----------------------------------------------------------------------------------


def local(now: int) -> Send:
    """Send a kind to the local database through the envelope's own path (``envelope.call``: the
    same decoding, checks and handler as ``POST /``, as a trusted caller), so a command answers
    alike with or without --server."""
    from resonate_project.edges.envelope import call
    from resonate_project.edges.kinds import CLI_KINDS

    def send(kind: str, data: dict[str, Any]) -> Response:
        assert kind in CLI_KINDS, f"{kind} is not a kind the command line sends (edges.kinds)"
        return call(kind, data, now)

    return send


def remote(url: str, token: str | None) -> Send:
    endpoint = url.rstrip("/") + "/"
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    headers = {"User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"

    def send(kind: str, data: dict[str, Any]) -> Response:
        envelope = {"kind": kind, "head": {"corrId": uuid.uuid4().hex}, "data": data}
        try:
            reply = httpx.post(endpoint, json=envelope, headers=headers, timeout=HTTP_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {endpoint}: {exc}") from exc
        try:
            body = reply.json()
            return Response(int(body["head"]["status"]), body["data"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CliError(
                f"{endpoint} answered HTTP {reply.status_code} without a protocol reply"
            ) from exc

    return send


@dataclass
class Ctx:
    send: Send
    now: int
    out: Out
    json: bool

    def request(self, kind: str, data: dict[str, Any]) -> Any:
        res = self.send(kind, data)
        if not res.ok:
            raise CliError(f"{kind}: {res.status} {res.data}")
        return res.data

    def show(self, data: Any, human: Callable[[], list[str]]) -> None:
        for line in [json.dumps(data, indent=2)] if self.json else human():
            self.out(line)


def run(options: dict[str, Any], out: Out) -> None:
    now = clock.now_ms()
    server = options.get("server")
    send = remote(server, options.get("token")) if server else local(now)
    options["run"](Ctx(send, now, out, bool(options.get("json"))), argparse.Namespace(**options))


# Options every management command takes (Django's BaseCommand parser; --version aside, which
# ``invoke`` also has): a call naming one goes through Django, which knows them.
DJANGO_OPTIONS = (
    "-v",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
)


def wants_server(argv: list[str]) -> bool:
    """Whether ``manage.py resonate ARGV`` can take the thin path: it names --server and none
    of Django's own options."""
    names = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
    return "--server" in names and not names.intersection(DJANGO_OPTIONS)


def main_remote(argv: list[str]) -> int | None:
    """``manage.py resonate ARGV --server URL`` without Django: the same parser and commands,
    the requests sent to the server. None when ARGV holds anything this parser does not know
    (Django's own options, --server on a local-only command): manage.py then runs the command
    through Django as usual, which answers those."""
    parser = argparse.ArgumentParser(prog="manage.py resonate", description=__doc__)
    add_arguments(parser)
    try:
        options, unknown = parser.parse_known_args(argv)
    except SystemExit as exit:  # -h, or a usage error: argparse has said so
        return int(exit.code or 0)
    if unknown or not options.server:
        return None
    with quiet_pipe():
        try:
            run(vars(options), lambda line: sys.stdout.write(f"{line}\n"))
        except CliError as exc:
            sys.stderr.write(f"CommandError: {exc}\n")  # as Django prints a command's error
            return 1
    return 0


@contextlib.contextmanager
def quiet_pipe() -> Iterator[None]:
    """Stop quietly when stdout's reader goes away (``resonate ... | head -1``): no
    BrokenPipeError traceback, now or when the interpreter flushes stdout at exit, and the exit
    status of a process ended by SIGPIPE (128 + 13), as ``yes | head`` leaves."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        # Whatever is still buffered can go nowhere: point stdout at /dev/null for the exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)


# --- credentials --------------------------------------------------------------------------------


def credentials_create(ctx: Ctx, args: argparse.Namespace) -> None:
    from resonate_project.access.credentials import CredentialError, credential_create

    try:
        credential, token = credential_create(
            name=args.name,
            now=ctx.now,
            prefix=args.prefix,
            groups=args.group,
            push_hosts=args.push_host,
            admin=args.admin,
        )
    except CredentialError as exc:
        raise CliError(str(exc)) from exc
    scope = "admin" if credential.admin else f"prefix {credential.prefix!r}"
    groups = ", ".join(credential.groups) or "any group"
    ctx.out(f"created credential {credential.name} ({scope}; streams {groups}); its token:")
    ctx.out(token)


def credentials_revoke(ctx: Ctx, args: argparse.Namespace) -> None:
    from resonate_project.access.credentials import CredentialError, credential_revoke

    try:
        credential = credential_revoke(name=args.name, now=ctx.now)
    except CredentialError as exc:
        raise CliError(str(exc)) from exc
    ctx.out(f"revoked credential {credential.name}")


def credentials_list(ctx: Ctx, args: argparse.Namespace) -> None:
    from resonate_project.access.models import ServiceCredential

    rows = [
        [
            c.name,
            "admin" if c.admin else repr(c.prefix),
            ",".join(c.groups) or "*",
            when(c.created_at),
            when(c.last_used_at),
            "revoked " + when(c.revoked_at) if c.revoked_at is not None else "active",
        ]
        for c in ServiceCredential.objects.all()
    ]
    headers = ["NAME", "PREFIX", "GROUPS", "CREATED", "LAST USED", "STATE"]
    for line in table(headers, rows) if rows else ["no credentials"]:
        ctx.out(line)


# --- the Django Tasks worker ---------------------------------------------------------------------


def worker(ctx: Ctx, args: argparse.Namespace) -> None:
    from django.tasks import task_backends
    from django.tasks.exceptions import InvalidTaskBackend

    from tasks_app.backends import ResonateBackend
    from tasks_app.worker import Worker

    try:
        backend = task_backends[args.backend]
    except InvalidTaskBackend as exc:
        raise CliError(str(exc)) from exc
    if not isinstance(backend, ResonateBackend):
        raise CliError(f"TASKS[{args.backend!r}] is not tasks_app.backends.ResonateBackend")
    if args.concurrency < 1:
        raise CliError("--concurrency must be at least 1")
    queues = args.queue or backend.worker_queues()
    Worker(backend, queues, args.concurrency, args.grace, ctx.out).run()


# --- retention ----------------------------------------------------------------------------------


def prune(ctx: Ctx, args: argparse.Namespace) -> None:
    from resonate_project.core.conf import resonate_settings
    from resonate_project.engine.retention import Policy
    from resonate_project.engine.retention import prune as prune_all

    configured = Policy.from_settings()
    policy = Policy(
        promises_ms=configured.promises_ms if args.older_than is None else args.older_than,
        django_tasks_ms=configured.django_tasks_ms
        if args.django_tasks_older_than is None
        else args.django_tasks_older_than,
        dead_letters_ms=configured.dead_letters_ms
        if args.dead_letters_older_than is None
        else args.dead_letters_older_than,
    )
    if policy.off:
        raise CliError(
            "nothing to prune: no retention window (pass --older-than, or set RETENTION_MS, "
            "RETENTION_DJANGO_TASKS_MS or RETENTION_DEAD_LETTERS_MS)"
        )
    if args.pace < 0:
        raise CliError("--pace must be 0 or more")
    done = prune_all(
        ctx.now,
        policy,
        batch=resonate_settings().RETENTION_BATCH,
        dry_run=args.dry_run,
        pace=args.pace,
    )
    counts = {**done.counts(), "dry_run": args.dry_run}
    verb = "would delete" if args.dry_run else "deleted"
    ctx.show(
        counts,
        lambda: [
            f"{verb} {done.trees} trees ({done.promises} promises, {done.tasks} tasks, "
            f"{done.django_tasks} Django task results) and {done.dead_letters} dead letters"
        ],
    )


# --- formatting ---------------------------------------------------------------------------------


def when(ms: int | None) -> str:
    return "-" if ms is None else iso(ms)


def value_line(value: dict[str, Any]) -> str:
    text = decoded_text(value.get("data"))
    headers = value.get("headers") or {}
    if headers:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(headers.items()))
        return f"{text if text is not None else '-'}  (headers: {shown})"
    return text if text is not None else "-"


def fields(rows: list[tuple[str, Any]]) -> list[str]:
    width = max(len(label) for label, _ in rows)
    lines = []
    for label, value in rows:
        values = value if isinstance(value, list) else [value]
        for i, item in enumerate(values or ["-"]):
            lines.append(f"{label if i == 0 else '':<{width}}  {item}".rstrip())
    return lines


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]
    return [
        "  ".join(f"{c:<{w}}" for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    ]


def tag_lines(tags: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(tags.items())]


def promise_lines(p: dict[str, Any], now: int) -> list[str]:
    return fields(
        [
            ("id", p["id"]),
            ("state", p["state"]),
            ("timeout", f"{when(p['timeoutAt'])} ({relative(p['timeoutAt'], now)})"),
            ("created", when(p["createdAt"])),
            ("settled", when(p.get("settledAt"))),
            ("param", value_line(p["param"])),
            ("value", value_line(p["value"])),
            ("tags", tag_lines(p["tags"])),
        ]
    )


def task_lines(t: dict[str, Any]) -> list[str]:
    return fields(
        [
            ("id", t["id"]),
            ("state", t["state"]),
            ("version", t["version"]),
            ("resumes", t["resumes"]),
            ("pid", t.get("pid", "-")),
            ("ttl", span(t["ttl"]) if "ttl" in t else "-"),
        ]
    )


def schedule_lines(s: dict[str, Any], now: int) -> list[str]:
    return fields(
        [
            ("id", s["id"]),
            ("cron", s["cron"]),
            ("promise id", s["promiseId"]),
            ("promise timeout", span(s["promiseTimeout"])),
            ("promise param", value_line(s["promiseParam"])),
            ("promise tags", tag_lines(s["promiseTags"])),
            ("created", when(s["createdAt"])),
            ("next run", f"{when(s['nextRunAt'])} ({relative(s['nextRunAt'], now)})"),
            ("last run", when(s.get("lastRunAt"))),
        ]
    )


def page_lines(what: str, headers: list[str], rows: list[list[str]], cursor: Any) -> list[str]:
    lines = table(headers, rows) if rows else [f"no {what}"]
    if cursor:
        lines.append(f"more: --cursor {cursor}")
    return lines


def value_of(data: str | None, headers: list[tuple[str, str]]) -> dict[str, Any]:
    value: dict[str, Any] = {}
    if headers:
        value["headers"] = dict(headers)
    if data is not None:
        value["data"] = base64.b64encode(data.encode()).decode()
    return value


def search_data(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    data = {k: v for k, v in extra.items() if v}
    if args.limit is not None:
        data["limit"] = args.limit
    if args.cursor:
        data["cursor"] = args.cursor
    return data


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
