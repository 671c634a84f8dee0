"""The benchmark's Django-side helper: runs in its own Django-configured process against the bench
database (``DATABASE_URL``) and prints one JSON object on stdout.

Rows are bulk-loaded by cloning a *template* row that the server's own code wrote (a promise made
through the protocol handler, an outbox row made through ``engine.outbox``): every derived
column (``external``, ``timer``, ``target``, ``branch``) and any column added later comes out as
the server would write it, and only the columns that must differ (id, deadlines, key) are set by
``INSERT ... SELECT ... FROM generate_series``.

    python bench/djtool.py load-promises --prefix p --count 100000 --state pending
    python bench/djtool.py load-outbox --address poll://uni@bench/s1 --count 20000
    python bench/djtool.py sweep --limit 500 --max-seconds 300
    python bench/djtool.py push --limit 100 --max-seconds 60
    python bench/djtool.py pairs --count 2000        # promise.create + settle via the services
    python bench/djtool.py enqueue --count 5000      # tests.tasksapp_fixtures.noop via Django's API
    python bench/djtool.py load-trees --prefix old --promises 1000000 --settled-before MS --fast
    python bench/djtool.py prune --older-than-ms 3600000 --max-seconds 20 [--runner]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

from outbox.models import Message  # noqa: E402
from promises.models import Promise  # noqa: E402
from resonate_project.core.clock import now_ms  # noqa: E402
from resonate_project.edges.envelope import handle_body  # noqa: E402
from tasks_app.models import Task  # noqa: E402

VERSION = "2026-04-01"
HOUR = 3_600_000


def call(kind: str, data: dict[str, Any], now: int) -> dict[str, Any]:
    body = {"kind": kind, "head": {"corrId": "bench", "version": VERSION}, "data": data}
    status, out = handle_body(json.dumps(body).encode(), now)
    reply: dict[str, Any] = json.loads(out)
    if status != 200:
        raise SystemExit(f"{kind} answered {status}: {reply}")
    return reply


def columns(table: str) -> list[str]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
            [table],
        )
        return [row[0] for row in cur.fetchall()]


def clone(table: str, pk: str, template: str, count: int, overrides: dict[str, str]) -> None:
    """Insert ``count`` copies of row ``template`` (g = 1..count in the override expressions)."""
    cols = columns(table)
    exprs = [overrides.get(c, f't."{c}"') for c in cols]
    sql = (
        f"INSERT INTO {table} ({', '.join(f'"{c}"' for c in cols)}) "
        f"SELECT {', '.join(exprs)} FROM {table} t CROSS JOIN generate_series(1, %s) g "
        f'WHERE t."{pk}" = %s'
    )
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(sql, [count, template])


def load_promises(prefix: str, count: int, state: str) -> dict[str, Any]:
    """``count`` external promises ``<prefix>-<g>``: pending with deadlines already passed (the
    timeout step's work), or settled (resolved) long ago."""
    now = now_ms()
    template = f"{prefix}-template"
    call(
        "promise.create",
        {
            "id": template,
            "timeoutAt": now + HOUR,
            "param": {"headers": {}, "data": "e30="},
            "tags": {"resonate:external": "true"},
        },
        now,
    )
    overrides = {
        "id": f"'{prefix}-' || g",
        # Distinct deadlines, all in the past: the step takes them in deadline order.
        "timeout_at": f"{now - 60_000} - g",
        "created_at": f"{now - HOUR} - g",
    }
    if state == "settled":
        call("promise.settle", {"id": template, "state": "resolved", "value": {}}, now)
        overrides["settled_at"] = f"{now - 120_000} - g"
    t0 = time.perf_counter()
    clone(Promise._meta.db_table, "id", template, count, overrides)
    Promise.objects.filter(id=template).delete()
    return {"loaded": count, "state": state, "seconds": time.perf_counter() - t0}


def load_outbox(address: str, count: int, prefix: str) -> dict[str, Any]:
    """``count`` due ``execute`` messages for ``address`` (tasks ``<prefix>-<g>``, version 1)."""
    from resonate_project.engine import outbox as enqueue

    template = f"{prefix}-template"
    with transaction.atomic():
        enqueue.execute(template, 1, address, now_ms())
    t0 = time.perf_counter()
    clone(
        Message._meta.db_table,
        "key",
        template,
        count,
        {"key": f"'{prefix}-' || g", "task_id": f"'{prefix}-' || g", "next_attempt_at": "0"},
    )
    Message.objects.filter(key=template).delete()
    return {"loaded": count, "seconds": time.perf_counter() - t0}


def sweep(limit: int, max_seconds: float) -> dict[str, Any]:
    """Call the timeout step until it finds nothing due (bounded by ``max_seconds``)."""
    from resonate_project.engine.steps import promise_timeouts

    processed = calls = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < max_seconds:
        calls += 1
        n = promise_timeouts(now_ms(), limit)
        processed += n
        if n == 0:
            break
    else:
        return {"processed": processed, "calls": calls, "seconds": None, "timed_out": True}
    return {"processed": processed, "calls": calls, "seconds": time.perf_counter() - t0}


def push(limit: int, max_seconds: float) -> dict[str, Any]:
    """Drain HTTP push messages until the outbox is empty, or ``max_seconds`` have passed (then
    the rate is what was delivered so far): ``outbox.push.drain_push``, which stops claiming at
    the time bound."""
    from outbox.push import drain_push

    loaded = Message.objects.count()
    claimed = 0
    t0 = time.perf_counter()
    while (left_s := max_seconds - (time.perf_counter() - t0)) > 0:
        n = drain_push(limit, max_seconds=left_s)
        claimed += n
        if n == 0:
            if not Message.objects.exists():
                break
            time.sleep(0.01)  # only failed pushes (backing off) remain
    seconds = time.perf_counter() - t0
    left = Message.objects.count()
    return {"claimed": claimed, "delivered": loaded - left, "left": left, "seconds": seconds}


def pairs(count: int) -> dict[str, Any]:
    """``promise_create`` + ``promise_settle`` through the typed services, one after another on
    one connection: the same path a worker's claim and fulfil take, without HTTP."""
    from promises import services as promises

    run = f"pair-{time.time_ns()}"
    cpu, started = time.process_time(), time.perf_counter()
    for i in range(count):
        now = now_ms()
        promises.promise_create(id=f"{run}-{i}", timeout_at=now + HOUR, now=now)
        promises.promise_settle(id=f"{run}-{i}", state="resolved", now=now_ms())
    seconds = time.perf_counter() - started
    return {
        "pairs": count,
        "seconds": seconds,
        "per_s": count / seconds,
        "cpu_s_per_1000": (time.process_time() - cpu) / count * 1000,
    }


def enqueue(count: int, batch: int = 500) -> dict[str, Any]:
    """``noop.enqueue()`` ``count`` times, ``batch`` per transaction."""
    from tests.tasksapp_fixtures import noop

    started = time.perf_counter()
    for first in range(0, count, batch):
        with transaction.atomic():
            for _ in range(min(batch, count - first)):
                noop.enqueue()
    seconds = time.perf_counter() - started
    return {"enqueued": count, "seconds": seconds, "per_s": count / seconds}


def tree_action(kind: str, pid: str, root: str, now: int, **extra: Any) -> dict[str, Any]:
    """A promise.create or promise.settle action of an SDK-shaped tree: the root (a workflow:
    scope global, a target, the call in its param) or a ctx.run child (scope local), tagged as
    resonate-sdk 0.8.1 tags them (bench/lua/task_cycle.lua)."""
    head = {"corrId": "bench", "version": VERSION}
    if kind == "settle":
        value = {"headers": {}, "data": base64.b64encode(b'{"ok":true}').decode()}
        return {
            "kind": "promise.settle",
            "head": head,
            "data": {"id": pid, "state": "resolved", "value": value},
        }
    tags = {"resonate:origin": root, "resonate:branch": root, "resonate:parent": root}
    if pid == root:
        call_ = {"func": "bench_workflow", "args": [1], "kwargs": {}, "version": 1}
        data = base64.b64encode(json.dumps(call_).encode()).decode()
        tags |= {"resonate:scope": "global", "resonate:target": "poll://any@bench"}
    else:
        data, tags["resonate:scope"] = "e30=", "local"
    param = {"headers": {}, "data": data}
    body = {"id": pid, "timeoutAt": now + HOUR, "param": param, "tags": tags, **extra}
    return {"kind": "promise.create", "head": head, "data": body}


SECONDARY_INDEXES = """
SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
WHERE t.relname IN ('promises_promise', 'tasks_app_task')
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
"""


def load_trees(prefix: str, promises: int, settled_before: int, fast: bool) -> dict[str, Any]:
    """``promises // 3`` settled SDK-shaped trees ``<prefix>-<g>``: a workflow root whose task is
    fulfilled and two ctx.run children ``:1`` and ``:2``, written once through the handlers
    (task.create, task.fence, task.fulfill) as templates and cloned. Tree ``g`` settled at
    ``settled_before - trees + g`` (ms; its children 2 and 1 ms before it): one tree per ms.

    ``fast`` (a database nothing else uses): the secondary indexes of the two tables are dropped
    for the load and built afterwards, and the foreign key checks skipped (every task's promise is
    in the same load) — PostgreSQL's own advice for a bulk load; the indexes come out the same."""
    trees = promises // 3
    now = now_ms()
    root = f"{prefix}-template"
    create = tree_action("create", root, root, now)
    call("task.create", {"pid": "bench-w", "ttl": 60_000, "action": create}, now)
    for child in (f"{root}:1", f"{root}:2"):
        for kind in ("create", "settle"):
            action = tree_action(kind, child, root, now)
            call("task.fence", {"id": root, "version": 1, "action": action}, now)
    call(
        "task.fulfill",
        {"id": root, "version": 1, "action": tree_action("settle", root, root, now)},
        now,
    )
    r = f"'{prefix}-' || g"
    settled = f"({settled_before - trees} + g)"
    ids = {root: r, f"{root}:1": f"{r} || ':1'", f"{root}:2": f"{r} || ':2'"}
    offset = {root: 0, f"{root}:1": 2, f"{root}:2": 1}
    t0 = time.perf_counter()
    dropped: list[tuple[str, str]] = []
    with transaction.atomic(), connection.cursor() as cur:
        if fast:
            cur.execute("SET LOCAL session_replication_role = replica")
            cur.execute("SET LOCAL maintenance_work_mem = '512MB'")
            cur.execute(SECONDARY_INDEXES)
            dropped = [(name, ddl) for name, ddl in cur.fetchall()]
            for name, _ in dropped:
                cur.execute(f"DROP INDEX {name}")
        for template, pid in ids.items():
            at = f"{settled} - {offset[template]}"
            clone(
                Promise._meta.db_table,
                "id",
                template,
                trees,
                {
                    "id": pid,
                    "tags": f"t.tags || jsonb_build_object('resonate:origin', {r}, "
                    f"'resonate:branch', {r}, 'resonate:parent', {r})",
                    "branch": r,
                    "parent": r,
                    "created_at": f"{at} - 40",
                    "settled_at": at,
                    "timeout_at": f"{at} + {HOUR}",
                },
            )
        clone(Task._meta.db_table, "id", root, trees, {"id": r})
        loaded = time.perf_counter() - t0
        for _, ddl in dropped:
            cur.execute(ddl)
    built = time.perf_counter() - t0 - loaded
    Message.objects.filter(task_id=root).delete()
    Promise.objects.filter(id__in=list(ids)).delete()
    return {
        "trees": trees,
        "promises": 3 * trees,
        "tasks": trees,
        "insert_seconds": loaded,
        "index_seconds": built,
        "seconds": time.perf_counter() - t0,
        "rebuilt_indexes": [name for name, _ in dropped],
    }


CLI_PACE = 1.0  # manage.py resonate prune's default --pace


def prune(
    older_than_ms: int, batch: int | None, max_seconds: float, runner: bool
) -> dict[str, Any]:
    """Retention for ``max_seconds``, window ``older_than_ms``: as the step runner does it
    (``runner``: ``engine.retention.tick`` called every 10 ms; it prunes every
    RETENTION_INTERVAL_MS for up to RETENTION_BUDGET_MS, the settings' defaults), or as
    ``manage.py resonate prune`` does it (``prune_pass`` with its cursor, paced as its default
    --pace, until a pass reads nothing more). Prints a line when it starts, so the caller can
    start its load."""
    from resonate_project.core.conf import resonate_settings
    from resonate_project.engine import retention

    policy = retention.Policy(promises_ms=older_than_ms)
    s = resonate_settings()
    batch = batch or s.RETENTION_BATCH
    total, cursor, passes = retention.Pruned(), cast(retention.Cursor | None, None), 0
    print("pruning", flush=True)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < max_seconds:
        if runner:
            one = retention.tick(now_ms())
            if one is None:
                time.sleep(0.01)
                continue
        else:
            started = time.perf_counter()
            one = retention.prune_pass(now_ms(), policy, batch=batch, cursor=cursor)
            cursor = one.cursor
            if not one.more and not one.trees:
                break
            time.sleep(CLI_PACE * (time.perf_counter() - started))  # resonate prune's --pace
        total.add(one)
        passes += 1
    seconds = time.perf_counter() - t0
    counts = total.counts()
    rows = counts["promises"] + counts["tasks"] + counts["django_tasks"] + counts["dead_letters"]
    return {
        **counts,
        "kept": total.kept,
        "mode": "runner" if runner else "back to back",
        "passes": passes,
        "batch": batch,
        "interval_ms": s.RETENTION_INTERVAL_MS if runner else 0,
        "budget_ms": getattr(s, "RETENTION_BUDGET_MS", None) if runner else None,
        "rows": rows,
        "seconds": seconds,
        "rows_per_s": rows / seconds if seconds else 0.0,
        "promises_per_s": counts["promises"] / seconds if seconds else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("load-promises")
    p.add_argument("--prefix", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--state", choices=["pending", "settled"], required=True)
    p = sub.add_parser("load-outbox")
    p.add_argument("--address", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--prefix", default="bench-msg")
    p = sub.add_parser("sweep")
    p.add_argument("--limit", type=int, default=500)
    p.add_argument("--max-seconds", type=float, default=300)
    p = sub.add_parser("push")
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--max-seconds", type=float, default=120)
    p = sub.add_parser("pairs")
    p.add_argument("--count", type=int, required=True)
    p = sub.add_parser("enqueue")
    p.add_argument("--count", type=int, required=True)
    p = sub.add_parser("load-trees")
    p.add_argument("--prefix", required=True)
    p.add_argument("--promises", type=int, required=True)
    p.add_argument("--settled-before", type=int, required=True, help="ms")
    p.add_argument("--fast", action="store_true")
    p = sub.add_parser("prune")
    p.add_argument("--older-than-ms", type=int, required=True)
    p.add_argument("--batch", type=int, help="default: RETENTION_BATCH")
    p.add_argument("--max-seconds", type=float, default=30)
    p.add_argument("--runner", action="store_true", help="as the step runner: retention.tick")
    args = parser.parse_args()
    if args.cmd == "pairs":
        out = pairs(args.count)
    elif args.cmd == "enqueue":
        out = enqueue(args.count)
    elif args.cmd == "load-promises":
        out = load_promises(args.prefix, args.count, args.state)
    elif args.cmd == "load-outbox":
        out = load_outbox(args.address, args.count, args.prefix)
    elif args.cmd == "load-trees":
        out = load_trees(args.prefix, args.promises, args.settled_before, args.fast)
    elif args.cmd == "prune":
        out = prune(args.older_than_ms, args.batch, args.max_seconds, args.runner)
    elif args.cmd == "sweep":
        out = sweep(args.limit, args.max_seconds)
    else:
        out = push(args.limit, args.max_seconds)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
