"""Task handlers T-01 … T-10 and task.search, table-driven against the spec digest (§3, §4, §5).

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

import pytest

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.core.protocol import Response
from resonate_project.engine import steps
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


# --- envelopes ---------------------------------------------------------------------------------


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


# --- setup helpers -----------------------------------------------------------------------------


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


# --- 400s come first (digest §3) ---------------------------------------------------------------


def create_untargeted(tid: str, version: int) -> dict[str, Any]:
    return {"pid": "w9", "ttl": TTL, "action": create_action(tid, tags=EXTERNAL)}


def create_timer_target(tid: str, version: int) -> dict[str, Any]:
    return {"pid": "w9", "ttl": TTL, "action": create_action(tid, tags={**TARGETED, **TIMER})}


def fence_self_create(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": create_action(tid, tags=TARGETED)}


def fence_self_settle(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": settle_action(tid)}


def suspend_empty(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "actions": []}


def suspend_self(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "actions": [callback_action(tid, tid)]}


def suspend_duplicate(tid: str, version: int) -> dict[str, Any]:
    actions = [callback_action("ext", tid), callback_action("ext", tid)]
    return {"id": tid, "version": version, "actions": actions}


def fulfill_with(state: str) -> Request:
    def request(tid: str, version: int) -> dict[str, Any]:
        return {"id": tid, "version": version, "action": settle_action(tid, state)}

    return request


# (kind, request, a word the 400 message should contain: the offending field)
BAD_REQUESTS = [
    pytest.param("task.create", create_untargeted, "resonate:target", id="create-untargeted"),
    pytest.param("task.create", create_timer_target, "resonate:timer", id="create-timer+target"),
    pytest.param("task.fence", fence_self_create, "id", id="fence-self-create"),
    pytest.param("task.fence", fence_self_settle, "id", id="fence-self-settle"),
    pytest.param("task.suspend", suspend_empty, "actions", id="suspend-empty"),
    pytest.param("task.suspend", suspend_self, "awaited", id="suspend-self"),
    pytest.param("task.suspend", suspend_duplicate, "awaited", id="suspend-duplicate"),
    pytest.param("task.fulfill", fulfill_with("pending"), "state", id="fulfill-pending"),
    pytest.param("task.fulfill", fulfill_with("rejected_timedout"), "state", id="fulfill-timedout"),
    pytest.param("task.fulfill", fulfill_with("done"), "state", id="fulfill-unknown-state"),
]

# Situations that would otherwise answer 404 / 422 / 409 / 200.
BAD_REQUEST_SITUATIONS = [
    ("absent", 1),
    ("untargeted", 1),
    ("acquired", 7),
    ("acquired", 1),
    ("dead_acquired", 1),
    ("halted", 1),
]


@pytest.mark.parametrize(("situation", "version"), BAD_REQUEST_SITUATIONS)
@pytest.mark.parametrize(("kind", "request_for", "field"), BAD_REQUESTS)
def test_spec_400s_come_before_every_lookup_and_write_nothing(
    api: Api, kind: str, request_for: Request, field: str, situation: str, version: int
) -> None:
    promise(api, "ext", tags=EXTERNAL)
    build(api, "t", situation)
    before = snapshot()
    res = api(kind, now=NOW, **request_for("t", version))
    assert res.status == 400, res.data
    assert snapshot() == before


@pytest.mark.parametrize(("kind", "request_for", "field"), BAD_REQUESTS)
def test_spec_400_message_names_the_offending_field(
    api: Api, kind: str, request_for: Request, field: str
) -> None:
    res = api(kind, now=NOW, **request_for("t", 1))
    assert res.status == 400
    assert isinstance(res.data, str)
    assert field.lower() in res.data.lower()


# Shape 400s (missing required field) are also decided from the request alone.
MISSING_FIELD = [
    ("task.get", {}, "id"),
    ("task.create", {"ttl": TTL, "action": create_action("t", tags=TARGETED)}, "pid"),
    ("task.acquire", {"id": "t", "version": 0, "pid": "w1"}, "ttl"),
    ("task.fence", {"id": "t", "version": 1}, "action"),
    ("task.heartbeat", {"tasks": []}, "pid"),
    ("task.suspend", {"id": "t", "actions": [callback_action("ext", "t")]}, "version"),
    ("task.fulfill", {"id": "t", "version": 1}, "action"),
    ("task.release", {"id": "t"}, "version"),
    ("task.halt", {}, "id"),
    ("task.continue", {}, "id"),
]


@pytest.mark.parametrize(("kind", "data", "field"), MISSING_FIELD)
def test_a_missing_field_is_a_400_naming_it_even_for_an_absent_task(
    api: Api, kind: str, data: dict[str, Any], field: str
) -> None:
    res = api(kind, now=NOW, **data)
    assert res.status == 400
    assert isinstance(res.data, str)
    assert field in res.data
    assert snapshot()["promises"] == []


# --- the fence block: acquire (expects pending) ------------------------------------------------

ACQUIRE_CASES = [
    ("absent", 0, 404),
    ("untargeted", 0, 404),
    ("acquired", 1, 409),  # the version is right, the state is not: state before version
    ("acquired", 0, 409),
    ("suspended", 1, 409),
    ("halted", 1, 409),
    ("fulfilled", 1, 409),
    ("dead_pending", 0, 409),  # stored pending, promise dead: views fulfilled
    ("dead_pending", 3, 409),
    ("pending", 1, 409),  # version mismatch
    ("pending", 5, 409),
]


@pytest.mark.parametrize(("situation", "version", "status"), ACQUIRE_CASES)
def test_task_acquire_refuses_in_fence_block_order_and_writes_nothing(
    api: Api, situation: str, version: int, status: int
) -> None:
    build(api, "t", situation)
    before = snapshot()
    res = acquire(api, "t", version, pid="w2", now=NOW)
    assert res.status == status, res.data
    assert isinstance(res.data, str)
    assert snapshot() == before


# --- the fence block: fence, suspend, fulfill, release (expect acquired) -----------------------


def fence_create_child(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": create_action("child", tags=TARGETED)}


def fence_settle_ext(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": settle_action("ext")}


def fence_settle_missing(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": settle_action("nope")}


def fence_settle_unsettable(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": settle_action("ext", "pending")}


def suspend_on_ext(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "actions": [callback_action("ext", tid)]}


def suspend_on_missing(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "actions": [callback_action("nope", tid)]}


def fulfill_resolved(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": settle_action(tid)}


def release(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version}


# (kind, request, status once the guards pass)
BLOCK_HANDLERS = [
    pytest.param("task.fence", fence_create_child, 200, id="fence-create"),
    pytest.param("task.fence", fence_settle_ext, 200, id="fence-settle"),
    pytest.param("task.fence", fence_settle_missing, 200, id="fence-settle-inner-404"),
    pytest.param("task.fence", fence_settle_unsettable, 200, id="fence-settle-inner-400"),
    pytest.param("task.suspend", suspend_on_ext, 200, id="suspend"),
    pytest.param("task.suspend", suspend_on_missing, 422, id="suspend-awaited-missing"),
    pytest.param("task.fulfill", fulfill_resolved, 200, id="fulfill"),
    pytest.param("task.release", release, 200, id="release"),
]

BLOCK_CASES = [
    ("absent", 1, 404),
    ("untargeted", 1, 404),
    ("pending", 0, 409),
    ("pending", 1, 409),
    ("suspended", 1, 409),
    ("halted", 1, 409),
    ("fulfilled", 1, 409),
    ("dead_acquired", 1, 409),  # right version, promise dead: views fulfilled
    ("dead_acquired", 0, 409),
    ("acquired", 0, 409),  # version mismatch, checked last
    ("acquired", 2, 409),
]


@pytest.mark.parametrize(("situation", "version", "status"), BLOCK_CASES)
@pytest.mark.parametrize(("kind", "request_for", "passed"), BLOCK_HANDLERS)
def test_fence_block_refuses_in_order_and_writes_nothing(
    api: Api,
    kind: str,
    request_for: Request,
    passed: int,
    situation: str,
    version: int,
    status: int,
) -> None:
    promise(api, "ext", tags=EXTERNAL)
    build(api, "t", situation)
    before = snapshot()
    res = api(kind, now=NOW, **request_for("t", version))
    assert res.status == status, res.data
    assert isinstance(res.data, str)
    assert snapshot() == before


@pytest.mark.parametrize(("kind", "request_for", "passed"), BLOCK_HANDLERS)
def test_fence_block_lets_the_holder_through(
    api: Api, kind: str, request_for: Request, passed: int
) -> None:
    promise(api, "ext", tags=EXTERNAL)
    acquired(api, "t")
    res = api(kind, now=NOW, **request_for("t", 1))
    assert res.status == passed, res.data


# --- T-01 task.get ------------------------------------------------------------------------------


@pytest.mark.parametrize("situation", ["absent", "untargeted"])
def test_task_get_404_without_a_task(api: Api, situation: str) -> None:
    build(api, "t", situation)
    assert api("task.get", now=NOW, id="t").status == 404


@pytest.mark.parametrize("situation", list(VIEWED))
def test_task_get_serves_the_viewed_record_and_writes_nothing(api: Api, situation: str) -> None:
    build(api, "t", situation)
    before = snapshot()
    assert task_of(api, "t") == {"id": "t", **VIEWED[situation]}
    assert snapshot() == before


def test_task_get_reads_fulfilled_from_the_deadline_on_before_anything_is_written(
    api: Api,
) -> None:
    acquired(api, "t", timeout=NOW)
    assert task_of(api, "t", now=NOW - 1)["state"] == "acquired"
    assert task_of(api, "t", now=NOW) == {
        "id": "t",
        "state": "fulfilled",
        "version": 1,
        "resumes": 0,
    }
    assert row("t").state == "acquired"  # -p: the read materialised nothing


def test_task_get_resumes_is_a_count(api: Api) -> None:
    acquired(api, "t")
    with_resume(api, "t", "x")
    with_resume(api, "t", "y")
    assert sorted(row("t").resumes) == ["x", "y"]
    assert task_of(api, "t")["resumes"] == 2


# --- T-02 task.create ---------------------------------------------------------------------------


def test_task_create_new_live_is_born_acquired_at_version_1(api: Api) -> None:
    tags = {**TARGETED, "app": "a"}
    res = api("task.create", now=NOW, pid="w1", ttl=TTL, action=create_action("t", tags=tags))
    data = ok(res)
    assert data["task"] == {
        "id": "t",
        "state": "acquired",
        "version": 1,
        "resumes": 0,
        "ttl": TTL,
        "pid": "w1",
    }
    assert data["promise"] == {
        "id": "t",
        "state": "pending",
        "param": {},
        "value": {},
        "tags": tags,
        "timeoutAt": FAR,
        "createdAt": NOW,
    }
    assert data["preload"] == []
    t = row("t")
    assert (t.expires_at, t.retry_at) == (NOW + TTL, None)
    assert execute_of("t") is None  # the caller already holds it
    assert record_of(api, "t") == data["promise"]


@pytest.mark.parametrize("timeout", [NOW, NOW - 1, 0])
def test_task_create_born_dead_is_rejected_timedout_with_a_fulfilled_v0_task(
    api: Api, timeout: int
) -> None:
    res = api(
        "task.create",
        now=NOW,
        pid="w1",
        ttl=TTL,
        action=create_action("t", timeout=timeout, tags=TARGETED),
    )
    data = ok(res)
    assert data["task"] == {"id": "t", "state": "fulfilled", "version": 0, "resumes": 0}
    assert data["promise"] == {
        "id": "t",
        "state": "rejected_timedout",
        "param": {},
        "value": {},
        "tags": TARGETED,
        "timeoutAt": timeout,
        "createdAt": timeout,
        "settledAt": timeout,
    }
    stored = Promise.objects.get(id="t")
    assert (stored.state, stored.settled_at) == ("rejected_timedout", timeout)
    assert row("t").state == "fulfilled"
    assert execute_of("t") is None


@pytest.mark.parametrize("tags", [{}, EXTERNAL, TIMER])
def test_task_create_on_an_existing_untargeted_promise_is_422(
    api: Api, tags: dict[str, str]
) -> None:
    promise(api, "t", tags=tags)
    before = snapshot()
    res = api("task.create", now=NOW, pid="w1", ttl=TTL, action=create_action("t", tags=TARGETED))
    assert res.status == 422
    assert snapshot() == before


@pytest.mark.parametrize(("setup", "version_before"), [("fresh", 0), ("woken", 1)])
def test_task_create_on_a_pending_task_reacquires_it(
    api: Api, setup: str, version_before: int
) -> None:
    if setup == "fresh":
        targeted(api, "t")
    else:
        woken(api, "t", "x")
        assert row("t").resumes == ["x"]
    stored = record_of(api, "t")
    res = api(
        "task.create",
        now=NOW,
        pid="w2",
        ttl=7_000,
        action=create_action("t", timeout=FAR - 1, tags={**TARGETED, "other": "tag"}),
    )
    data = ok(res)
    assert data["task"] == {
        "id": "t",
        "state": "acquired",
        "version": version_before + 1,
        "resumes": 0,
        "ttl": 7_000,
        "pid": "w2",
    }
    assert data["promise"] == stored  # the request's timeout/tags are not compared or applied
    assert isinstance(data["preload"], list)
    t = row("t")
    assert (t.expires_at, t.retry_at, t.resumes) == (NOW + 7_000, None, [])


@pytest.mark.parametrize("pid", ["w1", "w2"])
@pytest.mark.parametrize("situation", ["acquired", "suspended", "halted"])
def test_task_create_on_a_held_task_is_409_even_for_the_same_pid(
    api: Api, situation: str, pid: str
) -> None:
    build(api, "t", situation)
    before = snapshot()
    res = api("task.create", now=NOW, pid=pid, ttl=TTL, action=create_action("t", tags=TARGETED))
    assert res.status == 409
    assert snapshot() == before


@pytest.mark.parametrize(
    "situation", ["dead_pending", "dead_acquired", "dead_suspended", "dead_halted", "fulfilled"]
)
def test_task_create_on_a_dead_or_fulfilled_task_serves_the_projection_and_writes_nothing(
    api: Api, situation: str
) -> None:
    build(api, "t", situation)
    before = snapshot()
    res = api("task.create", now=NOW, pid="w2", ttl=TTL, action=create_action("t", tags=TARGETED))
    data = ok(res)
    assert data["task"] == {"id": "t", **VIEWED[situation]}
    assert data["task"]["state"] == "fulfilled"
    assert data["promise"] == record_of(api, "t")
    if situation.startswith("dead_"):
        assert data["promise"]["state"] == "rejected_timedout"
        assert data["promise"]["settledAt"] == NOW  # the deadline, which is NOW here
    assert snapshot() == before  # C4/C8 under -p: served, not materialised


# --- T-03 task.acquire --------------------------------------------------------------------------


def test_task_acquire_bumps_the_version_and_takes_the_lease(api: Api) -> None:
    targeted(api, "t")
    data = ok(acquire(api, "t", 0, pid="w2", ttl=7_000, now=NOW))
    assert data["task"] == {
        "id": "t",
        "state": "acquired",
        "version": 1,
        "resumes": 0,
        "ttl": 7_000,
        "pid": "w2",
    }
    assert data["promise"] == record_of(api, "t")
    assert data["preload"] == []
    t = row("t")
    assert (t.expires_at, t.retry_at) == (NOW + 7_000, None)


def test_task_acquire_clears_resumes(api: Api) -> None:
    woken(api, "t", "x")
    assert task_of(api, "t") == {"id": "t", "state": "pending", "version": 1, "resumes": 1}
    data = ok(acquire(api, "t", 1, now=NOW))
    assert (data["task"]["version"], data["task"]["resumes"]) == (2, 0)
    assert row("t").resumes == []


def test_a_second_acquire_at_the_same_version_is_409(api: Api) -> None:
    targeted(api, "t")
    ok(acquire(api, "t", 0, pid="w1", now=NOW))
    before = snapshot()
    assert acquire(api, "t", 0, pid="w2", now=NOW).status == 409
    assert snapshot() == before
    assert task_of(api, "t")["pid"] == "w1"


def test_task_acquire_preloads_the_branch_without_the_task_itself(api: Api) -> None:
    targeted(api, "t", tags={"resonate:branch": "t"})
    promise(api, "t.1", tags={"resonate:branch": "t"})
    promise(api, "u", tags={"resonate:branch": "u"})
    data = ok(acquire(api, "t", 0, now=NOW))
    assert data["preload"] == [record_of(api, "t.1")]


# --- T-04 task.fence ----------------------------------------------------------------------------


@pytest.mark.parametrize("child_tags", [{}, TARGETED], ids=["untargeted", "targeted"])
def test_task_fence_create_runs_promise_create_and_wraps_it(
    api: Api, child_tags: dict[str, str]
) -> None:
    acquired(api, "t")
    task_before = list(Task.objects.filter(promise_id="t").values())
    action = create_action("t.1", tags=child_tags, corr="c-7")
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    assert set(data) == {"action", "preload"}
    assert isinstance(data["preload"], list)
    child = record_of(api, "t.1")
    assert child["state"] == "pending"
    assert child["createdAt"] == NOW
    assert data["action"] == {
        "kind": "promise.create",
        "head": {"corrId": "c-7", "status": 200, "version": PROTOCOL_VERSION},
        "data": {"promise": child},
    }
    if child_tags:
        assert task_of(api, "t.1") == {"id": "t.1", "state": "pending", "version": 0, "resumes": 0}
        message = execute_of("t.1")
        assert message is not None
        assert (message.version, message.address) == (0, TARGET)
    else:
        assert api("task.get", now=NOW, id="t.1").status == 404
        assert execute_of("t.1") is None
    # The fence writes nothing to the task itself: same version, same lease.
    assert list(Task.objects.filter(promise_id="t").values()) == task_before


def test_task_fence_create_of_an_existing_promise_returns_it_unchanged(api: Api) -> None:
    acquired(api, "t")
    original = promise(api, "t.1", tags=EXTERNAL)
    action = create_action("t.1", timeout=FAR - 5, tags=TARGETED)
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    assert data["action"]["head"]["status"] == 200
    assert data["action"]["data"] == {"promise": original}
    assert api("task.get", now=NOW, id="t.1").status == 404


def test_task_fence_timer_with_target_creates_an_undispatched_task(api: Api) -> None:
    """Brief decision: timer+target is accepted (Python SDK ctx.sleep); the digest says 400."""
    acquired(api, "t")
    action = create_action("t.sleep", timeout=NOW + 60_000, tags={**TARGETED, **TIMER})
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    assert data["action"]["head"]["status"] == 200
    assert task_of(api, "t.sleep") == {
        "id": "t.sleep",
        "state": "pending",
        "version": 0,
        "resumes": 0,
    }
    assert row("t.sleep").retry_at == NOW + 60_000
    assert execute_of("t.sleep") is None


@pytest.mark.parametrize("state", ["resolved", "rejected", "rejected_canceled"])
def test_task_fence_settle_runs_promise_settle_and_fulfils_its_task(api: Api, state: str) -> None:
    acquired(api, "t")
    targeted(api, "child")
    value = {"headers": {"k": "v"}, "data": "eA=="}
    action = settle_action("child", state, value, corr="c-8")
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    settled = record_of(api, "child")
    assert (settled["state"], settled["value"], settled["settledAt"]) == (state, value, NOW)
    assert data["action"] == {
        "kind": "promise.settle",
        "head": {"corrId": "c-8", "status": 200, "version": PROTOCOL_VERSION},
        "data": {"promise": settled},
    }
    assert task_of(api, "child")["state"] == "fulfilled"
    assert row("child").state == "fulfilled"  # coupled write (§1.7)
    assert task_of(api, "t")["version"] == 1


def test_task_fence_settle_of_a_missing_promise_is_an_inner_404(api: Api) -> None:
    acquired(api, "t")
    before = snapshot()
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=settle_action("nope")))
    assert data["action"]["kind"] == "promise.settle"
    assert data["action"]["head"]["status"] == 404
    assert isinstance(data["action"]["data"], str)
    assert snapshot() == before


@pytest.mark.parametrize("state", ["pending", "rejected_timedout", "done"])
def test_task_fence_settle_with_an_unsettable_state_is_an_inner_400(api: Api, state: str) -> None:
    acquired(api, "t")
    promise(api, "ext", tags=EXTERNAL)
    before = snapshot()
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=settle_action("ext", state)))
    assert data["action"]["head"]["status"] == 400
    assert isinstance(data["action"]["data"], str)
    assert "state" in data["action"]["data"]
    assert snapshot() == before


def test_task_fence_preload_includes_a_child_created_in_the_same_branch(api: Api) -> None:
    acquired(api, "t", tags={"resonate:branch": "t"})
    action = create_action("t.1", tags={"resonate:branch": "t"})
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    assert data["preload"] == [record_of(api, "t.1")]


# --- T-05 task.heartbeat ------------------------------------------------------------------------


@pytest.fixture
def leases(api: Api) -> None:
    """a, b held by w1; c held by w2; d held by w1 but dead at NOW; e pending."""
    acquired(api, "a", ttl=10_000)
    acquired(api, "b", ttl=10_000)
    acquired(api, "c", ttl=10_000, pid="w2")
    acquired(api, "d", ttl=10_000, timeout=NOW)
    targeted(api, "e")


def expiries() -> dict[str, int | None]:
    return dict(Task.objects.values_list("promise_id", "expires_at"))


@pytest.mark.usefixtures("leases")
def test_task_heartbeat_extends_exactly_the_named_lease_by_its_stored_ttl(api: Api) -> None:
    before = expiries()
    res = api("task.heartbeat", now=NOW, pid="w1", tasks=[{"id": "a", "version": 1}])
    assert (res.status, res.data) == (200, {})
    assert expiries() == {**before, "a": NOW + 10_000}
    assert row("a").ttl == 10_000


@pytest.mark.usefixtures("leases")
@pytest.mark.parametrize(
    ("tid", "version"),
    [
        pytest.param("unknown", 1, id="unknown-id"),
        pytest.param("a", 0, id="wrong-version"),
        pytest.param("a", 2, id="newer-version"),
        pytest.param("c", 1, id="foreign-pid"),
        pytest.param("d", 1, id="dead-promise-C7"),
        pytest.param("e", 0, id="not-acquired"),
    ],
)
def test_task_heartbeat_skips_silently(api: Api, tid: str, version: int) -> None:
    before = snapshot()
    res = api("task.heartbeat", now=NOW, pid="w1", tasks=[{"id": tid, "version": version}])
    assert (res.status, res.data) == (200, {})
    assert snapshot() == before


@pytest.mark.usefixtures("leases")
def test_task_heartbeat_filters_each_reference_independently(api: Api) -> None:
    before = expiries()
    refs = [
        {"id": "unknown", "version": 1},
        {"id": "c", "version": 1},
        {"id": "a", "version": 0},
        {"id": "d", "version": 1},
        {"id": "b", "version": 1},
    ]
    res = api("task.heartbeat", now=NOW, pid="w1", tasks=refs)
    assert (res.status, res.data) == (200, {})
    assert expiries() == {**before, "b": NOW + 10_000}


@pytest.mark.usefixtures("leases")
def test_task_heartbeat_with_an_empty_list_is_200(api: Api) -> None:
    before = snapshot()
    res = api("task.heartbeat", now=NOW, pid="w1", tasks=[])
    assert (res.status, res.data) == (200, {})
    assert snapshot() == before


# --- T-06 task.suspend --------------------------------------------------------------------------


@pytest.fixture
def awaitables(api: Api) -> None:
    """The running task ``t`` (with one buffered resume) and promises it may await."""
    acquired(api, "t")
    with_resume(api, "t", "x")
    promise(api, "live", tags=EXTERNAL)
    promise(api, "done", tags=EXTERNAL)
    ok(api("promise.settle", now=T0, id="done", state="rejected", value={"data": "Ym9vbQ=="}))
    promise(api, "dead", tags=EXTERNAL, timeout=NOW)
    promise(api, "timer_dead", tags=TIMER, timeout=NOW)
    promise(api, "internal")
    targeted(api, "child")
    promise(api, "timer", tags=TIMER)
    promise(api, "global", tags={"resonate:scope": "global"})


@pytest.mark.usefixtures("awaitables")
@pytest.mark.parametrize(
    "awaited",
    [
        ["missing"],
        ["internal"],
        ["done", "missing"],
        ["missing", "done"],
        ["done", "internal"],
        ["internal", "done"],
        ["live", "dead", "internal"],
        ["internal", "live"],
    ],
)
def test_task_suspend_422_for_a_missing_or_internal_awaited_wins_over_300(
    api: Api, awaited: list[str]
) -> None:
    before = snapshot()
    assert suspend(api, "t", 1, *awaited, now=NOW).status == 422
    assert snapshot() == before  # resumes not cleared, nothing registered


@pytest.mark.usefixtures("awaitables")
@pytest.mark.parametrize(
    ("awaited", "settled"),
    [
        (["done"], ["done"]),
        (["live", "done"], ["done"]),
        (["dead"], ["dead"]),
        (["timer_dead", "live"], ["timer_dead"]),
        (["done", "child", "dead"], ["dead", "done"]),
    ],
)
def test_task_suspend_300_when_any_awaited_is_settled(
    api: Api, awaited: list[str], settled: list[str]
) -> None:
    before = snapshot()
    lease = lease_of("t")
    res = suspend(api, "t", 1, *awaited, now=NOW)
    assert res.status == 300, res.data
    assert set(res.data) == {"preload"}
    preload = {r["id"]: r for r in res.data["preload"]}
    assert set(preload) == set(settled)  # t has no branch: only the settled awaited
    for pid in settled:
        assert preload[pid] == record_of(api, pid)
    assert preload.get("timer_dead", {"state": "resolved"})["state"] == "resolved"
    # Still acquired, same version and lease; resumes cleared; nothing registered.
    assert task_of(api, "t") == {
        "id": "t",
        "state": "acquired",
        "version": 1,
        "resumes": 0,
        "ttl": TTL,
        "pid": "w1",
    }
    assert lease_of("t") == lease
    assert row("t").resumes == []
    assert awaiting("t") == set()
    after = snapshot()
    for table in ("promises", "callbacks", "listeners", "messages"):
        assert after[table] == before[table], table  # dead awaited projected, not materialised


@pytest.mark.usefixtures("awaitables")
@pytest.mark.parametrize(
    "awaited",
    [["live"], ["child"], ["timer"], ["global"], ["live", "child", "timer", "global"]],
)
def test_task_suspend_200_parks_the_task_and_registers_callbacks(
    api: Api, awaited: list[str]
) -> None:
    res = suspend(api, "t", 1, *awaited, now=NOW)
    assert (res.status, res.data) == (200, {})
    assert task_of(api, "t") == {"id": "t", "state": "suspended", "version": 1, "resumes": 0}
    t = row("t")
    assert (t.pid, t.ttl, t.expires_at, t.retry_at, t.resumes) == (None, None, None, None, [])
    assert awaiting("t") == set(awaited)


@pytest.mark.usefixtures("awaitables")
def test_task_suspend_registers_the_task_as_awaiter_whatever_the_action_says(api: Api) -> None:
    actions = [callback_action("live", "someone-else")]
    res = api("task.suspend", now=NOW, id="t", version=1, actions=actions)
    assert res.status == 200
    assert awaiting("t") == {"live"}
    assert awaiting("someone-else") == set()


# --- T-07 task.fulfill --------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["resolved", "rejected", "rejected_canceled"])
def test_task_fulfill_settles_the_tasks_own_promise(api: Api, state: str) -> None:
    acquired(api, "t")
    promise(api, "other", tags=EXTERNAL)
    value = {"headers": {"k": "v"}, "data": "ZG9uZQ=="}
    action = settle_action("other", state, value)  # action.data.id is not consulted
    data = ok(api("task.fulfill", now=NOW, id="t", version=1, action=action))
    settled = record_of(api, "t")
    assert data == {"promise": settled}
    assert (settled["state"], settled["value"], settled["settledAt"]) == (state, value, NOW)
    assert record_of(api, "other")["state"] == "pending"
    assert task_of(api, "t") == {"id": "t", "state": "fulfilled", "version": 1, "resumes": 0}
    t = row("t")
    assert (t.state, t.pid, t.ttl, t.expires_at, t.retry_at) == (
        "fulfilled",
        None,
        None,
        None,
        None,
    )


def test_task_fulfill_drains_listeners_and_callbacks_inline(api: Api) -> None:
    acquired(api, "t")
    address = "poll://uni@g/p1"
    ok(api("promise.register_listener", now=T0, awaited="t", address=address))
    acquired(api, "parked")
    assert suspend(api, "parked", 1, "t").status == 200
    acquired(api, "running")
    ok(api("promise.register_callback", now=T0, awaited="t", awaiter="running"))

    data = ok(api("task.fulfill", now=NOW, id="t", version=1, action=settle_action("t")))

    unblock = Message.objects.get(key=f"t:notify:{address}")
    assert (unblock.kind, unblock.address, unblock.promise) == ("unblock", address, data["promise"])
    assert not Listener.objects.filter(awaited_id="t").exists()
    assert not Callback.objects.filter(awaited_id="t").exists()
    assert task_of(api, "parked") == {
        "id": "parked",
        "state": "pending",
        "version": 1,
        "resumes": 1,
    }
    execute = execute_of("parked")
    assert execute is not None
    assert (execute.version, execute.address, execute.created_at) == (1, TARGET, NOW)
    assert row("running").resumes == ["t"]
    assert task_of(api, "running")["state"] == "acquired"


# --- T-08 task.release --------------------------------------------------------------------------


def test_task_release_returns_the_task_to_pending_and_dispatches_it(api: Api) -> None:
    acquired(api, "t")
    with_resume(api, "t", "x")
    res = api("task.release", now=NOW, id="t", version=1)
    assert (res.status, res.data) == (200, {})
    assert task_of(api, "t") == {"id": "t", "state": "pending", "version": 1, "resumes": 1}
    t = row("t")
    assert (t.pid, t.ttl, t.expires_at, t.resumes) == (None, None, None, ["x"])
    assert t.retry_at == NOW + RETRY_MS
    execute = execute_of("t")
    assert execute is not None
    assert (execute.version, execute.address, execute.created_at) == (1, TARGET, NOW)
    # The version is unchanged, so the next acquire presents it.
    assert ok(acquire(api, "t", 1, now=NOW))["task"]["version"] == 2


# --- T-09 task.halt -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("situation", "status"),
    [
        ("absent", 404),
        ("untargeted", 404),
        ("fulfilled", 409),
        ("dead_pending", 409),
        ("dead_acquired", 409),
        ("dead_suspended", 409),
        ("dead_halted", 409),
    ],
)
def test_task_halt_refusals_write_nothing(api: Api, situation: str, status: int) -> None:
    build(api, "t", situation)
    before = snapshot()
    assert api("task.halt", now=NOW, id="t").status == status
    assert snapshot() == before


def test_task_halt_of_a_halted_task_is_200_and_writes_nothing(api: Api) -> None:
    build(api, "t", "halted")
    before = snapshot()
    res = api("task.halt", now=NOW, id="t")
    assert (res.status, res.data) == (200, {})
    assert snapshot() == before


@pytest.mark.parametrize(
    ("situation", "resumes"), [("pending", 1), ("acquired", 1), ("suspended", 0)]
)
def test_task_halt_keeps_version_and_resumes(api: Api, situation: str, resumes: int) -> None:
    if situation == "pending":
        woken(api, "t", "x")
    elif situation == "acquired":
        acquired(api, "t")
        with_resume(api, "t", "x")
    else:
        build(api, "t", "suspended")
    resumes_before = row("t").resumes
    res = api("task.halt", now=NOW, id="t")
    assert (res.status, res.data) == (200, {})
    assert task_of(api, "t") == {"id": "t", "state": "halted", "version": 1, "resumes": resumes}
    t = row("t")
    assert (t.pid, t.ttl, t.expires_at, t.retry_at) == (None, None, None, None)
    assert t.resumes == resumes_before
    if situation == "suspended":
        assert awaiting("t") == {"t.aw"}  # registrations kept


@pytest.mark.parametrize("situation", ["pending", "acquired"])
def test_a_halted_task_is_not_dispatched(api: Api, situation: str) -> None:
    build(api, "t", situation)
    ok(api("task.halt", now=T0, id="t"))
    messages = snapshot()["messages"]
    steps.run_due(NOW + 10 * TTL, 100)  # past every retry and lease instant
    after = snapshot()["messages"]
    # Nothing new or changed; the execute left from before the halt is stale, and removed.
    assert [m for m in after if m not in messages] == []
    assert [m for m in after if m["kind"] == "execute"] == []
    assert task_of(api, "t", now=NOW + 10 * TTL)["state"] == "halted"


def test_a_wake_of_a_halted_suspended_task_only_records_the_resume(api: Api) -> None:
    acquired(api, "t")
    promise(api, "x", tags=EXTERNAL)
    assert suspend(api, "t", 1, "x").status == 200
    ok(api("task.halt", now=T0, id="t"))
    messages = snapshot()["messages"]
    ok(api("promise.settle", now=NOW, id="x", state="resolved", value={}))
    assert task_of(api, "t") == {"id": "t", "state": "halted", "version": 1, "resumes": 1}
    assert row("t").resumes == ["x"]
    assert snapshot()["messages"] == messages  # no execute for a halted task


# --- T-10 task.continue -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("situation", "status"),
    [
        ("absent", 404),
        ("untargeted", 404),
        ("pending", 409),
        ("acquired", 409),
        ("suspended", 409),
        ("fulfilled", 409),
        ("dead_pending", 409),
        ("dead_halted", 409),  # views fulfilled: not halted
    ],
)
def test_task_continue_refusals_write_nothing(api: Api, situation: str, status: int) -> None:
    build(api, "t", situation)
    before = snapshot()
    assert api("task.continue", now=NOW, id="t").status == status
    assert snapshot() == before


def test_task_continue_makes_a_halted_task_pending_and_dispatches_it(api: Api) -> None:
    acquired(api, "t")
    with_resume(api, "t", "x")
    ok(api("task.halt", now=T0, id="t"))
    res = api("task.continue", now=NOW, id="t")
    assert (res.status, res.data) == (200, {})
    assert task_of(api, "t") == {"id": "t", "state": "pending", "version": 1, "resumes": 1}
    assert row("t").retry_at == NOW + RETRY_MS
    execute = execute_of("t")
    assert execute is not None
    assert (execute.version, execute.address, execute.created_at) == (1, TARGET, NOW)


def test_task_continue_after_a_wake_while_halted_dispatches_with_the_resume(api: Api) -> None:
    acquired(api, "t")
    promise(api, "x", tags=EXTERNAL)
    assert suspend(api, "t", 1, "x").status == 200
    ok(api("task.halt", now=T0, id="t"))
    ok(api("promise.settle", now=T0, id="x", state="resolved", value={}))
    ok(api("task.continue", now=NOW, id="t"))
    assert task_of(api, "t") == {"id": "t", "state": "pending", "version": 1, "resumes": 1}
    execute = execute_of("t")
    assert execute is not None
    assert (execute.version, execute.created_at) == (1, NOW)


# --- task.search (brief: {state?, limit?, cursor?} -> {tasks, cursor?}, viewed state) ----------


def search(api: Api, now: int = NOW, **data: Any) -> dict[str, Any]:
    return ok(api("task.search", now=now, **data))


@pytest.mark.parametrize("state", ["pending", "acquired", "suspended", "halted", "fulfilled"])
def test_task_search_filters_on_the_viewed_state(api: Api, state: str) -> None:
    for situation in VIEWED:
        build(api, situation, situation)
    promise(api, "plain")  # a promise without a task is never listed
    before = snapshot()
    data = search(api, state=state)
    expected = sorted(s for s, viewed in VIEWED.items() if viewed["state"] == state)
    assert [t["id"] for t in data["tasks"]] == expected
    assert "cursor" not in data
    for record in data["tasks"]:
        assert record == task_of(api, record["id"])
    assert snapshot() == before


def test_task_search_without_a_state_lists_every_task_in_id_order(api: Api) -> None:
    for situation in VIEWED:
        build(api, situation, situation)
    promise(api, "plain")
    data = search(api)
    assert [t["id"] for t in data["tasks"]] == sorted(VIEWED)
    assert data["tasks"] == [task_of(api, s) for s in sorted(VIEWED)]


@pytest.mark.parametrize(("count", "limit"), [(5, 2), (4, 2), (3, 1)])
def test_task_search_pages_by_cursor(api: Api, count: int, limit: int) -> None:
    ids = [f"s{i}" for i in range(1, count + 1)]
    for tid in reversed(ids):
        targeted(api, tid)
    promise(api, "s0")  # untargeted: not a task
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        query: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            query["cursor"] = cursor
        data = search(api, **query)
        page = [t["id"] for t in data["tasks"]]
        assert len(page) <= limit
        seen.extend(page)
        pages += 1
        if "cursor" not in data:
            break
        assert data["cursor"] == page[-1]
        cursor = data["cursor"]
    assert seen == ids
    assert pages == -(-count // limit)  # no trailing empty page when count % limit == 0


def test_task_search_pages_with_a_state_filter(api: Api) -> None:
    for tid in ["a1", "a2", "a3"]:
        acquired(api, tid)
    targeted(api, "a15")
    first = search(api, state="acquired", limit=2)
    assert [t["id"] for t in first["tasks"]] == ["a1", "a2"]
    second = search(api, state="acquired", limit=2, cursor=first["cursor"])
    assert [t["id"] for t in second["tasks"]] == ["a3"]
    assert "cursor" not in second


def test_task_search_limit_defaults_to_100(api: Api) -> None:
    for i in range(101):
        targeted(api, f"n{i:03d}")
    data = search(api)
    assert len(data["tasks"]) == 100
    assert data["cursor"] == "n099"
    rest = search(api, cursor=data["cursor"])
    assert [t["id"] for t in rest["tasks"]] == ["n100"]


@pytest.mark.parametrize(
    ("data", "field"),
    [({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"state": "claimed"}, "state")],
)
def test_task_search_400s(api: Api, data: dict[str, Any], field: str) -> None:
    res = api("task.search", now=NOW, **data)
    assert res.status == 400
    assert isinstance(res.data, str)
    assert field in res.data
