"""P-03 promise.settle (spec digest §4): the verdict at ``now``, the task fulfilled in the same
write, the first verdict wins, a late settle answers the deadline's verdict.
"""

from __future__ import annotations

from typing import Any

import pytest

from tasks_app.models import Task
from tests.support.factories import Api
from tests.support.promise_kinds import (
    EXTERNAL,
    INTERNAL,
    T0,
    TARGETED,
    TIMER,
    create,
    settle,
    snapshot,
    stored,
    task_of,
)

# --- P-03 promise.settle --------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["resolved", "rejected", "rejected_canceled"])
@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="no value"),
        pytest.param({}, id="empty value"),
        pytest.param({"headers": {"h": "v"}, "data": "eyJvayI6IHRydWV9"}, id="headers and data"),
    ],
)
def test_settling_a_live_promise_stores_the_verdict_at_now(
    api: Api, state: str, value: dict[str, Any] | None
) -> None:
    original = create(api, "p", now=T0, timeout_at=60_000, tags=EXTERNAL)
    extra = {} if value is None else {"value": value}
    record = settle(api, "p", state, now=T0 + 500, **extra)
    assert record == {**original, "state": state, "value": value or {}, "settledAt": T0 + 500}
    assert api("promise.get", now=T0 + 600, id="p").data == {"promise": record}
    row = stored("p")
    assert (row.state, row.settled_at) == (state, T0 + 500)


def test_settling_a_targeted_promise_fulfils_its_task_in_the_same_write(api: Api) -> None:
    create(api, "job", now=T0, tags=TARGETED)
    settle(api, "job", "resolved", now=T0 + 1)
    task = Task.objects.get(pk="job")
    assert (task.state, task.version, task.retry_at, task.resumes) == ("fulfilled", 0, None, [])
    assert task_of(api, "job", T0 + 1) == {
        "id": "job",
        "state": "fulfilled",
        "version": 0,
        "resumes": 0,
    }


def test_settle_one_millisecond_before_the_deadline_still_wins(api: Api) -> None:
    create(api, "p", now=T0, timeout_at=T0 + 100, tags=EXTERNAL)
    assert settle(api, "p", "rejected", now=T0 + 99)["state"] == "rejected"


def test_settle_of_an_absent_promise_is_404_and_writes_nothing(api: Api) -> None:
    create(api, "present")
    before = snapshot()
    res = api("promise.settle", now=T0, id="absent", state="resolved")
    assert res.status == 404
    assert snapshot() == before


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param("resolved", "resolved", id="resolved then resolved"),
        pytest.param("resolved", "rejected", id="resolved then rejected"),
        pytest.param("rejected", "resolved", id="rejected then resolved"),
        pytest.param("rejected_canceled", "resolved", id="canceled then resolved"),
    ],
)
def test_the_first_verdict_wins_and_a_second_settle_writes_nothing(
    api: Api, first: str, second: str
) -> None:
    create(api, "p", now=T0, tags=TARGETED)
    won = settle(api, "p", first, now=T0 + 1, value={"data": "first"})
    before = snapshot()
    res = api("promise.settle", now=T0 + 2, id="p", state=second, value={"data": "second"})
    assert res.status == 200
    assert res.data == {"promise": won}
    assert snapshot() == before


@pytest.mark.parametrize(
    ("tags", "state"),
    [
        pytest.param(EXTERNAL, "rejected_timedout", id="external"),
        pytest.param(INTERNAL, "rejected_timedout", id="internal"),
        pytest.param(TARGETED, "rejected_timedout", id="targeted"),
        pytest.param(TIMER, "resolved", id="timer"),
    ],
)
@pytest.mark.parametrize("late", [0, 1, 10_000], ids=["now == deadline", "1ms late", "10s late"])
def test_a_late_settle_returns_the_deadline_verdict_with_200_and_writes_nothing(
    api: Api, tags: dict[str, str], state: str, late: int
) -> None:
    deadline = 30_000
    original = create(api, "p", now=T0, timeout_at=deadline, tags=tags)
    before = snapshot()
    res = api("promise.settle", now=deadline + late, id="p", state="resolved", value={"data": "x"})
    assert res.status == 200
    assert res.data == {"promise": {**original, "state": state, "settledAt": deadline, "value": {}}}
    assert snapshot() == before
