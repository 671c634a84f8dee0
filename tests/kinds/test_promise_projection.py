"""Projection on every response (C8): a pending promise past its deadline reads settled on every
kind that returns it, and reading writes nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import FAR, Api
from tests.support.promise_kinds import (
    EXTERNAL,
    T0,
    TARGETED,
    TIMER,
    create,
    snapshot,
    stored,
)

# --- projection on every response (C8) ---------------------------------------------------------


def _project_get(api: Api, now: int) -> Any:
    return api("promise.get", now=now, id="dead")


def _project_create(api: Api, now: int) -> Any:
    return api("promise.create", now=now, id="dead", timeoutAt=FAR)


def _project_settle(api: Api, now: int) -> Any:
    return api("promise.settle", now=now, id="dead", state="rejected")


def _project_callback(api: Api, now: int) -> Any:
    return api("promise.register_callback", now=now, awaited="dead", awaiter="waiter")


def _project_listener(api: Api, now: int) -> Any:
    return api("promise.register_listener", now=now, awaited="dead", address="http://l/x")


def _project_search(api: Api, now: int) -> Any:
    res = api("promise.search", now=now)
    if res.status == 200:
        hits = [p for p in res.data["promises"] if p["id"] == "dead"]
        res.data = {"promise": hits[0] if hits else None}
    return res


@pytest.mark.parametrize(
    "call",
    [
        _project_get,
        _project_create,
        _project_settle,
        _project_callback,
        _project_listener,
        _project_search,
    ],
    ids=["get", "create", "settle", "register_callback", "register_listener", "search"],
)
@pytest.mark.parametrize(
    ("tags", "state"),
    [
        pytest.param(EXTERNAL, "rejected_timedout", id="external"),
        pytest.param(TIMER, "resolved", id="timer"),
        pytest.param(TARGETED, "rejected_timedout", id="targeted"),
    ],
)
@pytest.mark.parametrize("late", [0, 7_000], ids=["at the deadline", "after the deadline"])
def test_every_response_projects_a_dead_pending_promise_and_writes_nothing(
    api: Api, call: Any, tags: dict[str, str], state: str, late: int
) -> None:
    deadline = 25_000
    original = create(api, "dead", now=T0, timeout_at=deadline, tags=tags)
    create(api, "waiter", now=T0, tags=TARGETED)
    before = snapshot()
    res = call(api, deadline + late)
    assert res.status == 200, res.data
    assert res.data["promise"] == {**original, "state": state, "settledAt": deadline, "value": {}}
    assert snapshot() == before
    assert stored("dead").state == "pending"


def test_a_promise_reads_pending_one_millisecond_before_its_deadline(api: Api) -> None:
    original = create(api, "p", now=T0, timeout_at=T0 + 1_000)
    assert api("promise.get", now=T0 + 999, id="p").data == {"promise": original}
