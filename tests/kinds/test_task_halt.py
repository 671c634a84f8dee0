"""T-09 task.halt (spec digest §4)."""

from __future__ import annotations

import pytest

from resonate_project.engine import steps
from tests.support.factories import Api
from tests.support.task_kinds import (
    EXTERNAL,
    NOW,
    T0,
    TTL,
    acquired,
    awaiting,
    build,
    ok,
    promise,
    row,
    snapshot,
    suspend,
    task_of,
    with_resume,
    woken,
)

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
