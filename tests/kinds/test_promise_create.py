"""P-02 promise.create (spec digest §4): born live or born dead, targeted promises and their task,
timers, ``resonate:delay``, and the idempotent re-create.
"""

from __future__ import annotations

from typing import Any

import pytest

from resonate_project.engine.steps import retry_dispatch, run_due
from tasks_app.models import Task
from tests.support.factories import FAR, Api
from tests.support.promise_kinds import (
    EXTERNAL,
    INTERNAL,
    RETRY_TIMEOUT_MS,
    T0,
    TARGET,
    TARGETED,
    TIMER,
    create,
    executes,
    snapshot,
    stored,
    task_of,
)

# --- P-02 promise.create: born live, born dead ----------------------------------------------------


@pytest.mark.parametrize(
    "tags",
    [
        pytest.param(INTERNAL, id="untagged"),
        pytest.param(EXTERNAL, id="external"),
        pytest.param(TIMER, id="timer"),
        pytest.param(TARGETED, id="targeted"),
        pytest.param({"resonate:target": ""}, id="empty-target"),
    ],
)
@pytest.mark.parametrize("timeout_at", [T0 + 1, FAR], ids=["deadline-now+1", "far-deadline"])
def test_a_promise_with_its_deadline_ahead_is_born_pending(
    api: Api, tags: dict[str, str], timeout_at: int
) -> None:
    record = create(api, "p", now=T0, timeout_at=timeout_at, tags=tags)
    assert record["state"] == "pending"
    assert record["createdAt"] == T0
    assert "settledAt" not in record
    assert record["value"] == {}
    row = stored("p")
    assert (row.state, row.settled_at) == ("pending", None)


@pytest.mark.parametrize(
    ("tags", "timeout_at", "state"),
    [
        pytest.param(INTERNAL, T0, "rejected_timedout", id="deadline == now"),
        pytest.param(INTERNAL, T0 - 1, "rejected_timedout", id="deadline < now"),
        pytest.param(INTERNAL, 0, "rejected_timedout", id="deadline 0"),
        pytest.param(EXTERNAL, T0, "rejected_timedout", id="external, deadline == now"),
        pytest.param(TARGETED, T0, "rejected_timedout", id="targeted, deadline == now"),
        pytest.param(TIMER, T0, "resolved", id="timer, deadline == now"),
        pytest.param(TIMER, T0 - 5_000, "resolved", id="timer, deadline < now"),
        pytest.param(
            {"resonate:timer": "TRUE"}, T0, "rejected_timedout", id="timer=TRUE is no timer"
        ),
    ],
)
def test_a_promise_past_its_deadline_is_born_settled_at_the_deadline(
    api: Api, tags: dict[str, str], timeout_at: int, state: str
) -> None:
    record = create(api, "p", now=T0, timeout_at=timeout_at, tags=tags)
    assert record["state"] == state
    assert record["createdAt"] == timeout_at
    assert record["settledAt"] == timeout_at
    assert record["value"] == {}
    row = stored("p")
    assert (row.state, row.created_at, row.settled_at) == (state, timeout_at, timeout_at)
    assert api("promise.get", now=T0, id="p").data == {"promise": record}


def test_a_targeted_promise_born_live_gets_a_pending_task_dispatched_at_once(api: Api) -> None:
    create(api, "job", now=T0, tags=TARGETED)
    assert task_of(api, "job", T0) == {"id": "job", "state": "pending", "version": 0, "resumes": 0}
    assert executes() == {"job": (0, TARGET, T0)}
    assert Task.objects.get(pk="job").retry_at == T0 + RETRY_TIMEOUT_MS


@pytest.mark.parametrize(
    ("tags", "state"),
    [
        pytest.param(TARGETED, "rejected_timedout", id="targeted"),
        pytest.param({**TARGETED, **TIMER}, "resolved", id="targeted timer"),
    ],
)
def test_a_targeted_promise_born_dead_gets_a_fulfilled_task_and_no_dispatch(
    api: Api, tags: dict[str, str], state: str
) -> None:
    assert create(api, "job", now=T0, timeout_at=T0, tags=tags)["state"] == state
    assert task_of(api, "job", T0) == {
        "id": "job",
        "state": "fulfilled",
        "version": 0,
        "resumes": 0,
    }
    assert Task.objects.get(pk="job").state == "fulfilled"
    run_due(T0 + 60_000, 100)
    assert executes() == {}


def test_an_untargeted_promise_has_no_task(api: Api) -> None:
    create(api, "p", tags=EXTERNAL)
    assert api("task.get", now=T0, id="p").status == 404
    assert not Task.objects.exists()


def test_a_targeted_timer_is_accepted_never_dispatched_and_resolved_at_its_deadline(
    api: Api,
) -> None:
    """Brief decision (spec HEAD says 400): the Python SDK's ctx.sleep sends timer + target."""
    deadline = T0 + 30_000
    record = create(api, "sleep", now=T0, timeout_at=deadline, tags={**TARGETED, **TIMER})
    assert record["state"] == "pending"
    assert task_of(api, "sleep", T0) == {
        "id": "sleep",
        "state": "pending",
        "version": 0,
        "resumes": 0,
    }
    assert Task.objects.get(pk="sleep").retry_at == deadline
    assert executes() == {}

    run_due(deadline - 1, 100)
    assert executes() == {}
    assert stored("sleep").state == "pending"

    run_due(deadline, 100)
    got = api("promise.get", now=deadline, id="sleep").data["promise"]
    assert (got["state"], got["settledAt"], got["value"]) == ("resolved", deadline, {})
    assert stored("sleep").state == "resolved"
    assert Task.objects.get(pk="sleep").state == "fulfilled"
    assert executes() == {}


# --- P-02 resonate:delay --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delay", "first_dispatch"),
    [
        pytest.param(T0 + 3_000, T0 + 3_000, id="delay in the future"),
        pytest.param(T0, T0, id="delay == now"),
        pytest.param(T0 - 3_000, T0, id="delay in the past"),
        pytest.param(0, T0, id="delay 0"),
    ],
)
def test_delay_makes_the_first_dispatch_due_at_max_delay_now(
    api: Api, delay: int, first_dispatch: int
) -> None:
    create(api, "job", now=T0, tags={**TARGETED, "resonate:delay": str(delay)})
    if first_dispatch > T0:
        assert Task.objects.get(pk="job").retry_at == first_dispatch
        assert executes() == {}
        retry_dispatch(first_dispatch - 1, 100)
        assert executes() == {}
        assert task_of(api, "job", first_dispatch - 1)["state"] == "pending"
        retry_dispatch(first_dispatch, 100)
    assert executes() == {"job": (0, TARGET, first_dispatch)}
    assert Task.objects.get(pk="job").retry_at == first_dispatch + RETRY_TIMEOUT_MS


def test_a_delay_at_or_past_the_deadline_is_never_dispatched(api: Api) -> None:
    deadline = T0 + 5_000
    create(
        api, "job", now=T0, timeout_at=deadline, tags={**TARGETED, "resonate:delay": str(deadline)}
    )
    assert executes() == {}
    run_due(deadline, 100)
    assert executes() == {}
    assert (
        api("promise.get", now=deadline, id="job").data["promise"]["state"] == "rejected_timedout"
    )
    assert task_of(api, "job", deadline)["state"] == "fulfilled"


# --- P-02 idempotent re-create --------------------------------------------------------------------


ORIGINAL: dict[str, Any] = {
    "timeoutAt": 60_000,
    "tags": {"k": "v", **EXTERNAL},
    "param": {"headers": {"h": "1"}, "data": "first"},
}


@pytest.mark.parametrize(
    "again",
    [
        pytest.param({}, id="same arguments"),
        pytest.param({"timeoutAt": 90_000}, id="other deadline"),
        pytest.param({"timeoutAt": T0}, id="deadline that would be born dead"),
        pytest.param({"param": {"data": "second"}}, id="other param"),
        pytest.param({"tags": {"k": "w"}}, id="other tags"),
        pytest.param({"tags": TARGETED}, id="now targeted"),
        pytest.param({"tags": TIMER}, id="now a timer"),
    ],
)
def test_recreate_returns_the_original_and_writes_nothing(api: Api, again: dict[str, Any]) -> None:
    res = api("promise.create", now=T0, id="p", **ORIGINAL)
    assert res.status == 200
    original = res.data["promise"]
    before = snapshot()
    res = api("promise.create", now=T0 + 1_000, **{"id": "p", **ORIGINAL, **again})
    assert res.status == 200
    assert res.data == {"promise": original}
    assert snapshot() == before


@pytest.mark.parametrize(
    ("tags", "state"),
    [
        pytest.param(EXTERNAL, "rejected_timedout", id="external"),
        pytest.param(TIMER, "resolved", id="timer"),
        pytest.param(TARGETED, "rejected_timedout", id="targeted"),
    ],
)
@pytest.mark.parametrize("late", [0, 1], ids=["at the deadline", "after the deadline"])
def test_recreate_after_the_deadline_returns_the_original_projected(
    api: Api, tags: dict[str, str], state: str, late: int
) -> None:
    deadline = 40_000
    original = create(api, "p", now=T0, timeout_at=deadline, tags=tags)
    before = snapshot()
    res = api("promise.create", now=deadline + late, id="p", timeoutAt=FAR, tags=tags)
    assert res.status == 200
    assert res.data == {"promise": {**original, "state": state, "settledAt": deadline}}
    assert snapshot() == before
