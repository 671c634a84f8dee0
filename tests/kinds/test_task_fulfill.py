"""T-07 task.fulfill (spec digest §4)."""

from __future__ import annotations

import pytest

from outbox.models import Message
from promises.models import Callback, Listener
from tests.support.factories import Api
from tests.support.task_kinds import (
    EXTERNAL,
    NOW,
    T0,
    TARGET,
    acquired,
    execute_of,
    ok,
    promise,
    record_of,
    row,
    settle_action,
    suspend,
    task_of,
)

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
