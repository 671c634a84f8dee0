"""T-02 task.create (spec digest §4)."""

from __future__ import annotations

import pytest

from promises.models import Promise
from tests.support.factories import FAR, Api
from tests.support.task_kinds import (
    EXTERNAL,
    NOW,
    TARGETED,
    TIMER,
    TTL,
    VIEWED,
    build,
    create_action,
    execute_of,
    ok,
    promise,
    record_of,
    row,
    snapshot,
    targeted,
    woken,
)

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
