"""Helpers of the task kinds' table tests (tests/kinds/test_task_*.py: T-01 … T-10 and
task.search, table-driven against the spec digest, §3, §4, §5).

Setup runs at ``T0``; the request under test runs at ``NOW``. A promise whose deadline is ``NOW``
is logically dead at ``NOW`` (the boundary belongs to the dead side, digest glossary), so the
"dead_*" situations are stored pending/acquired/suspended/halted but read as fulfilled.

The fence block (digest §4): task absent 404 → task's promise absent 409 → viewed state wrong 409
→ promise not pending 409 → version mismatch 409. A dead promise makes the task *view* as
fulfilled, so a dead task is refused by the state check already; every refusal writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.core.protocol import Response
from tasks_app.models import Task
from tests.support.factories import FAR, Api

T0 = 1_000
NOW = 2_000
TTL = 30_000
RETRY_MS = 5_000  # RETRY_TIMEOUT_MS default (brief: inline dispatch re-arms at now + 5000)
TARGET = "poll://any@workers"
PROTOCOL_VERSION = "2026-04-01"
EXTERNAL = {"resonate:external": "true"}
TARGETED = {"resonate:target": TARGET}
TIMER = {"resonate:timer": "true"}

Request = Callable[[str, int], dict[str, Any]]


def create_action(
    pid: str, *, timeout: int = FAR, tags: dict[str, str] | None = None, corr: str = "c-1"
) -> dict[str, Any]:
    return {
        "kind": "promise.create",
        "head": {"corrId": corr},
        "data": {"id": pid, "timeoutAt": timeout, "param": {}, "tags": tags or {}},
    }


def settle_action(
    pid: str, state: str = "resolved", value: dict[str, Any] | None = None, corr: str = "c-1"
) -> dict[str, Any]:
    return {
        "kind": "promise.settle",
        "head": {"corrId": corr},
        "data": {"id": pid, "state": state, "value": value or {}},
    }


def callback_action(awaited: str, awaiter: str) -> dict[str, Any]:
    return {
        "kind": "promise.register_callback",
        "head": {},
        "data": {"awaited": awaited, "awaiter": awaiter},
    }


def ok(res: Response) -> dict[str, Any]:
    assert res.status == 200, res.data
    assert isinstance(res.data, dict)
    return res.data


def promise(
    api: Api, pid: str, *, tags: dict[str, str] | None = None, timeout: int = FAR, now: int = T0
) -> dict[str, Any]:
    res = api("promise.create", now=now, id=pid, timeoutAt=timeout, param={}, tags=tags or {})
    record: dict[str, Any] = ok(res)["promise"]
    return record


def targeted(
    api: Api, tid: str, *, timeout: int = FAR, tags: dict[str, str] | None = None
) -> dict[str, Any]:
    return promise(api, tid, tags={**TARGETED, **(tags or {})}, timeout=timeout)


def acquire(
    api: Api, tid: str, version: int = 0, *, pid: str = "w1", ttl: int = TTL, now: int = T0
) -> Response:
    return api("task.acquire", now=now, id=tid, version=version, pid=pid, ttl=ttl)


def acquired(
    api: Api,
    tid: str,
    *,
    timeout: int = FAR,
    tags: dict[str, str] | None = None,
    pid: str = "w1",
    ttl: int = TTL,
) -> None:
    """A targeted promise whose task ``pid`` holds at version 1 (lease until T0 + ttl)."""
    targeted(api, tid, timeout=timeout, tags=tags)
    ok(acquire(api, tid, 0, pid=pid, ttl=ttl))


def suspend(api: Api, tid: str, version: int, *awaited: str, now: int = T0) -> Response:
    actions = [callback_action(a, tid) for a in awaited]
    return api("task.suspend", now=now, id=tid, version=version, actions=actions)


def with_resume(api: Api, tid: str, awaited: str) -> None:
    """Buffer a resume on a running task: a callback registered while it is acquired, then the
    awaited promise settles (R4 appends to ``resumes``)."""
    promise(api, awaited, tags=EXTERNAL)
    ok(api("promise.register_callback", now=T0, awaited=awaited, awaiter=tid))
    ok(api("promise.settle", now=T0, id=awaited, state="resolved", value={}))


def woken(api: Api, tid: str, awaited: str) -> None:
    """Suspended on ``awaited``, then woken by its settlement: pending v1, resumes [awaited]."""
    acquired(api, tid)
    promise(api, awaited, tags=EXTERNAL)
    assert suspend(api, tid, 1, awaited).status == 200
    ok(api("promise.settle", now=T0, id=awaited, state="resolved", value={}))


def build(api: Api, tid: str, situation: str) -> None:
    """Put task ``tid`` into a named situation (see ``VIEWED`` for what each one reads as)."""
    base = situation.removeprefix("dead_")
    timeout = NOW if situation.startswith("dead_") else FAR
    if base == "absent":
        return
    if base == "untargeted":
        promise(api, tid, timeout=timeout)
        return
    targeted(api, tid, timeout=timeout)
    if base == "pending":
        return
    ok(acquire(api, tid, 0))
    if base == "suspended":
        promise(api, f"{tid}.aw", tags=EXTERNAL)
        assert suspend(api, tid, 1, f"{tid}.aw").status == 200
    elif base == "halted":
        ok(api("task.halt", now=T0, id=tid))
    elif base == "fulfilled":
        ok(api("task.fulfill", now=T0, id=tid, version=1, action=settle_action(tid)))
    else:
        assert base == "acquired", situation


# What task.get answers at NOW for each situation (digest §2.2, "fact T").
VIEWED: dict[str, dict[str, Any]] = {
    "pending": {"state": "pending", "version": 0, "resumes": 0},
    "acquired": {"state": "acquired", "version": 1, "resumes": 0, "ttl": TTL, "pid": "w1"},
    "suspended": {"state": "suspended", "version": 1, "resumes": 0},
    "halted": {"state": "halted", "version": 1, "resumes": 0},
    "fulfilled": {"state": "fulfilled", "version": 1, "resumes": 0},
    "dead_pending": {"state": "fulfilled", "version": 0, "resumes": 0},
    "dead_acquired": {"state": "fulfilled", "version": 1, "resumes": 0},
    "dead_suspended": {"state": "fulfilled", "version": 1, "resumes": 0},
    "dead_halted": {"state": "fulfilled", "version": 1, "resumes": 0},
}


def record_of(api: Api, pid: str, now: int = NOW) -> dict[str, Any]:
    record: dict[str, Any] = ok(api("promise.get", now=now, id=pid))["promise"]
    return record


def task_of(api: Api, tid: str, now: int = NOW) -> dict[str, Any]:
    record: dict[str, Any] = ok(api("task.get", now=now, id=tid))["task"]
    return record


def row(tid: str) -> Task:
    return Task.objects.get(promise_id=tid)


def lease_of(tid: str) -> tuple[int, str | None, int | None, int | None]:
    t = row(tid)
    return t.version, t.pid, t.ttl, t.expires_at


def execute_of(tid: str) -> Message | None:
    return Message.objects.filter(kind="execute", task_id=tid).first()


def rows(qs: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in qs]


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every stored row the protocol owns, to show a request wrote nothing."""
    return {
        "promises": rows(Promise.objects.order_by("id").values()),
        "tasks": rows(Task.objects.order_by("promise_id").values()),
        "callbacks": rows(
            Callback.objects.order_by("awaited_id", "awaiter_id").values(
                "awaited_id", "awaiter_id", "ready"
            )
        ),
        "listeners": rows(
            Listener.objects.order_by("awaited_id", "address").values(
                "awaited_id", "address", "ready"
            )
        ),
        "messages": rows(Message.objects.order_by("key").values()),
    }


def awaiting(tid: str) -> set[str]:
    return set(Callback.objects.filter(awaiter_id=tid).values_list("awaited_id", flat=True))
