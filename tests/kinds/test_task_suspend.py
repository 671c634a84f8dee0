"""T-06 task.suspend (spec digest §4)."""

from __future__ import annotations

import pytest

from tests.support.factories import Api
from tests.support.task_kinds import (
    EXTERNAL,
    NOW,
    T0,
    TIMER,
    TTL,
    acquired,
    awaiting,
    callback_action,
    lease_of,
    ok,
    promise,
    record_of,
    row,
    snapshot,
    suspend,
    targeted,
    task_of,
    with_resume,
)

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
