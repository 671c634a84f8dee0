"""The debug surface (spec digest §7, C12; brief "Debug"): off by default, every ``debug.*`` kind
answers 403 and ``resonate:debug_time`` is ignored; on, the head sets ``now``, ``debug.start``
pauses the internal steps until ``debug.tick`` runs them, ``debug.stop`` resumes, ``debug.reset``
empties the state and ``debug.snap`` shows it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client, override_settings

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.edges.envelope import handle_body
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import FAR, Api

DEBUG_KINDS = ["debug.start", "debug.stop", "debug.reset", "debug.snap", "debug.tick"]
ADDRESS = "poll://any@workers"
TARGET = {"resonate:target": ADDRESS}
EXTERNAL = {"resonate:external": "true"}
LISTENER = "poll://uni@workers/client-1"
RETRY = 5_000


@pytest.fixture
def debug_off(db: Any) -> Iterator[None]:
    with override_settings(RESONATE={"DEBUG": False}):
        yield


@pytest.fixture
def debug_on(db: Any) -> Iterator[None]:
    with override_settings(RESONATE={"DEBUG": True}):
        yield


def envelope(kind: str, data: dict[str, Any], head: dict[str, Any] | None = None) -> bytes:
    body = {"kind": kind, "head": {"corrId": "c-1", "version": "2026-04-01", **(head or {})}}
    return json.dumps({**body, "data": data}).encode()


def post(
    kind: str, data: dict[str, Any], clock_ms: int, head: dict[str, Any] | None = None
) -> tuple[int, dict[str, Any]]:
    status, body = handle_body(envelope(kind, data, head), clock_ms)
    reply: dict[str, Any] = json.loads(body)
    assert reply["head"]["status"] == status
    return status, reply


def create_action(promise_id: str, timeout_at: int, tags: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "promise.create",
        "head": {},
        "data": {"id": promise_id, "timeoutAt": timeout_at, "param": {}, "tags": tags},
    }


def workflow_awaiting_child(api: Api) -> None:
    """``wf`` (acquired v1) is suspended on the external ``child``, which ``LISTENER`` watches."""
    api("task.create", pid="worker-1", ttl=60_000, action=create_action("wf", FAR, TARGET))
    api("promise.create", id="child", timeoutAt=FAR, tags=EXTERNAL)
    api("promise.register_listener", awaited="child", address=LISTENER)
    action = {
        "kind": "promise.register_callback",
        "head": {},
        "data": {"awaited": "child", "awaiter": "wf"},
    }
    assert api("task.suspend", id="wf", version=1, actions=[action]).status == 200


def execute_for(task_id: str) -> Message | None:
    return Message.objects.filter(kind="execute", task_id=task_id).first()


def unblocks() -> list[str]:
    return sorted(Message.objects.filter(kind="unblock").values_list("key", flat=True))


# --- debug off --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", DEBUG_KINDS)
def test_every_debug_kind_is_forbidden_when_debug_is_off(
    debug_off: None, client: Client, api: Api, kind: str
) -> None:
    api("promise.create", id="kept", timeoutAt=FAR, tags=TARGET)
    body = envelope(kind, {"time": 10_000} if kind == "debug.tick" else {})

    res = client.post("/", data=body, content_type="application/json")

    assert res.status_code == 403
    reply = res.json()
    assert (reply["kind"], reply["head"]["status"]) == (kind, 403)
    assert isinstance(reply["data"], str)
    # Nothing happened: the state is intact and the steps are not paused.
    assert Promise.objects.filter(pk="kept").exists()
    api("promise.create", id="after", timeoutAt=FAR, tags=TARGET)
    assert execute_for("after") is not None


def test_debug_time_head_is_ignored_when_debug_is_off(debug_off: None) -> None:
    data = {"id": "p", "timeoutAt": 5_000, "param": {}, "tags": {}}

    status, reply = post("promise.create", data, clock_ms=10_000, head={"resonate:debug_time": 1})

    assert status == 200
    record = reply["data"]["promise"]
    # Evaluated at the clock (10000), so born past its deadline; at 1 it would be pending.
    assert (record["state"], record["createdAt"], record["settledAt"]) == (
        "rejected_timedout",
        5_000,
        5_000,
    )


# --- debug on ---------------------------------------------------------------------------------


def test_debug_time_head_sets_now(debug_on: None, client: Client) -> None:
    data = {"id": "p", "timeoutAt": 5_000, "param": {}, "tags": {}}

    status, reply = post("promise.create", data, clock_ms=10_000, head={"resonate:debug_time": 1})

    assert status == 200
    record = reply["data"]["promise"]
    assert (record["state"], record["createdAt"]) == ("pending", 1)

    # Through the HTTP endpoint, whose own clock is the wall clock (far past 5000).
    def state_at(debug_time: int) -> str:
        body = envelope("promise.get", {"id": "p"}, {"resonate:debug_time": debug_time})
        res = client.post("/", data=body, content_type="application/json")
        assert res.status_code == 200
        state: str = res.json()["data"]["promise"]["state"]
        return state

    assert state_at(4_999) == "pending"
    assert state_at(5_000) == "rejected_timedout"


def test_debug_start_pauses_the_steps(debug_on: None, api: Api) -> None:
    workflow_awaiting_child(api)

    assert api("debug.start").status == 200
    settled = api("promise.settle", now=2_000, id="child", state="resolved", value={})
    api("promise.create", now=2_000, id="job", timeoutAt=FAR, tags=TARGET)

    assert settled.data["promise"]["state"] == "resolved"
    assert unblocks() == []
    assert execute_for("wf") is None
    assert execute_for("job") is None
    assert list(Callback.objects.values_list("awaiter_id", "ready")) == [("wf", True)]
    assert list(Listener.objects.values_list("address", "ready")) == [(LISTENER, True)]
    assert api("task.get", now=2_000, id="wf").data["task"]["state"] == "suspended"
    assert api("task.get", now=2_000, id="job").data["task"]["state"] == "pending"


def test_debug_tick_runs_everything_due_at_its_time(debug_on: None, api: Api) -> None:
    workflow_awaiting_child(api)
    api("promise.create", id="late", timeoutAt=3_500, tags=EXTERNAL)
    api("promise.register_listener", awaited="late", address=LISTENER)
    api("debug.start")
    api("promise.settle", now=2_000, id="child", state="resolved", value={})
    api("promise.create", now=2_000, id="job", timeoutAt=FAR, tags=TARGET)

    assert api("debug.tick", now=2_000, time=3_000).status == 200

    assert unblocks() == [f"child:notify:{LISTENER}"]
    woken = api("task.get", now=3_000, id="wf").data["task"]
    assert (woken["state"], woken["version"], woken["resumes"]) == ("pending", 1, 1)
    wf_offer, job_offer = execute_for("wf"), execute_for("job")
    assert wf_offer is not None
    assert job_offer is not None
    assert (wf_offer.version, job_offer.version) == (1, 0)
    assert Task.objects.get(pk="job").retry_at == 3_000 + RETRY  # dispatched at the tick's time
    assert Promise.objects.get(pk="late").state == "pending"  # not before its deadline

    assert api("debug.tick", now=3_000, time=4_000).status == 200

    late = Promise.objects.get(pk="late")
    assert (late.state, late.settled_at) == ("rejected_timedout", 3_500)
    assert unblocks() == [f"child:notify:{LISTENER}", f"late:notify:{LISTENER}"]
    # Still paused: a settle after the tick again waits for the next tick.
    api("promise.create", now=4_000, id="other", timeoutAt=FAR, tags=EXTERNAL)
    api("promise.register_listener", now=4_000, awaited="other", address=LISTENER)
    api("promise.settle", now=4_000, id="other", state="rejected", value={})
    assert f"other:notify:{LISTENER}" not in unblocks()


def test_debug_stop_resumes_the_steps(debug_on: None, api: Api) -> None:
    workflow_awaiting_child(api)
    api("debug.start")

    assert api("debug.stop").status == 200
    api("promise.settle", now=2_000, id="child", state="resolved", value={})

    assert unblocks() == [f"child:notify:{LISTENER}"]
    message = execute_for("wf")
    assert message is not None
    assert message.version == 1
    assert api("task.get", now=2_000, id="wf").data["task"]["state"] == "pending"


def test_debug_reset_empties_everything_and_keeps_the_paused_mode(debug_on: None, api: Api) -> None:
    workflow_awaiting_child(api)
    api("promise.create", id="job", timeoutAt=FAR, tags=TARGET)  # an execute row
    api(
        "schedule.create",
        id="nightly",
        cron="* * * * *",
        promiseId="{{.id}}-{{.timestamp}}",
        promiseTimeout=60_000,
        promiseTags=TARGET,
    )
    api("debug.start")

    assert api("debug.reset").status == 200

    for model in (Promise, Task, Callback, Listener, Schedule, Message):
        assert not model.objects.exists(), model.__name__
    snap = api("debug.snap").data
    assert all(rows == [] for rows in snap.values()), snap
    # Still paused: a new targeted promise is not dispatched until a tick.
    api("promise.create", now=2_000, id="fresh", timeoutAt=FAR, tags=TARGET)
    assert execute_for("fresh") is None
    api("debug.tick", time=2_000)
    assert execute_for("fresh") is not None


def test_debug_snap_returns_the_whole_state(debug_on: None, api: Api) -> None:
    workflow_awaiting_child(api)
    api("promise.create", id="job", timeoutAt=FAR, tags=TARGET)
    api("promise.create", id="lapsed", timeoutAt=1_500, tags={})
    api(
        "schedule.create",
        id="nightly",
        cron="* * * * *",
        promiseId="{{.id}}-{{.timestamp}}",
        promiseTimeout=60_000,
        promiseTags=TARGET,
    )

    res = api("debug.snap", now=2_000)

    assert res.status == 200
    snap = res.data
    promises = {p["id"]: p for p in snap["promises"]}
    assert set(promises) == {"wf", "child", "job", "lapsed"}
    assert promises["job"]["tags"] == TARGET
    assert (promises["job"]["timeoutAt"], promises["job"]["createdAt"]) == (FAR, 1_000)
    assert promises["lapsed"]["state"] == "pending"  # stored state, not the projection
    tasks = {t["id"]: t for t in snap["tasks"]}
    assert set(tasks) == {"wf", "job"}
    assert (tasks["wf"]["state"], tasks["wf"]["version"]) == ("suspended", 1)
    assert (tasks["job"]["state"], tasks["job"]["version"]) == ("pending", 0)
    assert [(c["awaited"], c["awaiter"]) for c in snap["callbacks"]] == [("child", "wf")]
    assert [(ln["awaited"], ln["address"]) for ln in snap["listeners"]] == [("child", LISTENER)]
    assert [s["id"] for s in snap["schedules"]] == ["nightly"]
    assert [(m["kind"], m["address"]) for m in snap["messages"]] == [("execute", ADDRESS)]
    assert snap["messages"][0]["task"] == {"id": "job", "version": 0}
