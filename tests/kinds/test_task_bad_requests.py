"""The task kinds' 400s come first (spec digest §3): decided from the request alone, before every
lookup, naming the offending field, writing nothing.

Table tests from the task handlers' file (tests/support/task_kinds.py: the situations, the
helpers, and how "nothing was written" is checked).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import Api
from tests.support.task_kinds import (
    EXTERNAL,
    NOW,
    TARGETED,
    TIMER,
    TTL,
    Request,
    build,
    callback_action,
    create_action,
    promise,
    settle_action,
    snapshot,
)

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
