"""T-03 task.acquire (spec digest §4)."""

from __future__ import annotations

from tests.support.factories import Api
from tests.support.task_kinds import (
    NOW,
    acquire,
    ok,
    promise,
    record_of,
    row,
    snapshot,
    targeted,
    task_of,
    woken,
)

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
