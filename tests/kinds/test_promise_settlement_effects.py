"""What a settlement does inline (spec digest §4 P-03, §5): one unblock per listener, a suspended
awaiter woken, a resume buffered on an acquired one, the timeout's verdict wins.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from outbox.models import Message
from promises.models import Callback, Listener
from resonate_project.engine.steps import promise_timeouts
from tasks_app.models import Task
from tests.support.factories import FAR, Api
from tests.support.promise_kinds import (
    EXTERNAL,
    RETRY_TIMEOUT_MS,
    T0,
    TARGET,
    TARGETED,
    callback_action,
    callbacks,
    create,
    executes,
    listeners,
    settle,
    snapshot,
    task_of,
)

# --- inline effects of a settlement ---------------------------------------------------------------


ADDRESSES = ["http://a.example/hook", "https://b.example/hook", "poll://uni@group/pid"]


def _settle_by_client(api: Api, now: int) -> None:
    settle(api, "p", "rejected", now=now, value={"headers": {"e": "1"}, "data": "boom"})


def _settle_by_deadline(api: Api, now: int) -> None:
    promise_timeouts(now, 100)


@pytest.mark.parametrize(
    ("how", "at"),
    [
        pytest.param(_settle_by_client, T0 + 500, id="client settle"),
        pytest.param(_settle_by_deadline, 40_000, id="deadline (timeout step)"),
    ],
)
def test_a_settlement_writes_one_unblock_per_listener_carrying_the_settled_record(
    api: Api, how: Any, at: int
) -> None:
    create(api, "p", now=T0, timeout_at=40_000, tags=EXTERNAL)
    create(api, "other", now=T0, tags=EXTERNAL)
    for address in ADDRESSES:
        api("promise.register_listener", now=T0, awaited="p", address=address)
    api("promise.register_listener", now=T0, awaited="other", address=ADDRESSES[0])

    how(api, at)

    record = api("promise.get", now=at, id="p").data["promise"]
    assert record["state"] != "pending"
    unblocks = {m.key: m for m in Message.objects.filter(kind="unblock")}
    assert set(unblocks) == {f"p:notify:{address}" for address in ADDRESSES}
    for address in ADDRESSES:
        message = unblocks[f"p:notify:{address}"]
        assert message.address == address
        assert message.promise == record
    assert listeners() == {("other", ADDRESSES[0])}


def _suspended_workflow(api: Api, awaited: str, deadline: int = FAR) -> None:
    """``wf`` (targeted) acquired at version 1 and suspended on ``awaited``."""
    create(api, "wf", now=T0, timeout_at=deadline, tags=TARGETED)
    assert api("task.acquire", now=T0, id="wf", version=0, pid="worker", ttl=60_000).status == 200
    res = api(
        "task.suspend", now=T0 + 1, id="wf", version=1, actions=[callback_action(awaited, "wf")]
    )
    assert res.status == 200, res.data
    assert task_of(api, "wf", T0 + 1)["state"] == "suspended"


def test_settling_the_awaited_wakes_a_suspended_awaiter(api: Api) -> None:
    create(api, "child", now=T0, tags=EXTERNAL)
    _suspended_workflow(api, "child")
    at = T0 + 2_000
    settle(api, "child", now=at)
    assert task_of(api, "wf", at) == {"id": "wf", "state": "pending", "version": 1, "resumes": 1}
    task = Task.objects.get(pk="wf")
    assert task.resumes == ["child"]
    assert task.retry_at == at + RETRY_TIMEOUT_MS
    assert executes()["wf"] == (1, TARGET, at)
    assert callbacks() == set()


def test_a_callback_registered_by_register_callback_wakes_the_awaiter_too(api: Api) -> None:
    create(api, "child", now=T0, tags=EXTERNAL)
    create(api, "wf", now=T0, tags=TARGETED)
    assert api("promise.register_callback", now=T0, awaited="child", awaiter="wf").status == 200
    api("task.acquire", now=T0, id="wf", version=0, pid="worker", ttl=60_000)
    api("task.suspend", now=T0 + 1, id="wf", version=1, actions=[callback_action("child", "wf")])
    assert callbacks() == {("child", "wf")}
    settle(api, "child", now=T0 + 5)
    assert task_of(api, "wf", T0 + 5) == {
        "id": "wf",
        "state": "pending",
        "version": 1,
        "resumes": 1,
    }
    assert executes()["wf"] == (1, TARGET, T0 + 5)


def test_settling_the_awaited_buffers_a_resume_on_an_acquired_awaiter(api: Api) -> None:
    create(api, "child", now=T0, tags=EXTERNAL)
    create(api, "wf", now=T0, tags=TARGETED)
    api("task.acquire", now=T0, id="wf", version=0, pid="worker", ttl=60_000)
    assert api("promise.register_callback", now=T0, awaited="child", awaiter="wf").status == 200
    messages_before = snapshot()["Message"]
    settle(api, "child", now=T0 + 5)
    assert task_of(api, "wf", T0 + 5) == {
        "id": "wf",
        "state": "acquired",
        "version": 1,
        "resumes": 1,
        "ttl": 60_000,
        "pid": "worker",
    }
    assert snapshot()["Message"] == messages_before
    assert callbacks() == set()


def test_timeout_always_wins_a_dead_awaiter_is_not_woken(api: Api) -> None:
    """C6: the awaiter's own deadline has passed when the awaited settles."""
    create(api, "child", now=T0, tags=EXTERNAL)
    _suspended_workflow(api, "child", deadline=T0 + 1_000)
    messages_before = snapshot()["Message"]
    settle(api, "child", now=T0 + 1_000)
    assert task_of(api, "wf", T0 + 1_000)["state"] == "fulfilled"
    assert Task.objects.get(pk="wf").state != "pending"
    assert snapshot()["Message"] == messages_before


def test_while_debug_has_paused_the_steps_a_settle_only_marks_subscriptions_ready(
    api: Api,
) -> None:
    with override_settings(RESONATE={"DEBUG": True}):
        assert api("debug.start", now=T0).status == 200
        create(api, "child", now=T0, tags=EXTERNAL)
        create(api, "job", now=T0, tags=TARGETED)
        assert executes() == {}
        _suspended_workflow(api, "child")
        api("promise.register_listener", now=T0, awaited="child", address="http://l/1")
        settle(api, "child", now=T0 + 10)
        assert list(Listener.objects.values_list("address", "ready")) == [("http://l/1", True)]
        assert list(Callback.objects.values_list("awaiter_id", "ready")) == [("wf", True)]
        assert not Message.objects.filter(kind="unblock").exists()
        assert task_of(api, "wf", T0 + 10)["state"] == "suspended"
