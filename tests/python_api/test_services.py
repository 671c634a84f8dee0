"""The typed services as a Python caller meets them: keyword arguments, typed records, typed
refusals naming the field, nothing changed by a refusal, and a host's transaction deciding
whether a write (and its outbox message) happens at all."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.db import transaction

from outbox.models import Message
from promises import services as promises
from promises.models import Listener, Promise
from resonate_project.core.errors import Conflict, InvalidRequest, NotFound, ProtocolError
from schedules import services as schedules
from tasks_app import services as tasks
from tasks_app.models import Task
from tests.support.docs_blocks import block

FAR = 10**13
NOW = 1_000
TARGET = {"resonate:target": "poll://any@workers"}
PYTHON_API = "docs/reference/python-api.md"


def test_a_promise_round_trip_through_the_services(db: Any) -> None:
    created = promises.promise_create(id="p", timeout_at=FAR, tags={"k": "v"}, now=NOW)
    assert (created["id"], created["state"], created["tags"]) == ("p", "pending", {"k": "v"})
    settled = promises.promise_settle(id="p", state="resolved", value={"data": "eA=="}, now=NOW + 1)
    assert (settled["state"], settled["value"], settled["settledAt"]) == (
        "resolved",
        {"data": "eA=="},
        NOW + 1,
    )
    assert promises.promise_get(id="p", now=NOW + 2) == settled
    page = promises.promise_search(state="resolved", now=NOW + 2)
    assert ([r["id"] for r in page.items], page.cursor) == (["p"], None)


def test_a_refusal_is_typed_names_its_field_and_changes_nothing(db: Any) -> None:
    with pytest.raises(InvalidRequest) as bad:
        promises.promise_create(id="p", timeout_at=-1, now=NOW)
    assert (bad.value.status, bad.value.field) == (400, "timeoutAt")
    with pytest.raises(InvalidRequest) as state:
        promises.promise_settle(id="p", state="done", now=NOW)
    assert state.value.field == "state"
    with pytest.raises(NotFound):
        promises.promise_get(id="p", now=NOW)
    assert not Promise.objects.exists()


def test_a_task_is_created_acquired_fenced_and_fulfilled(db: Any) -> None:
    claim = tasks.task_create(pid="w1", ttl=30_000, id="job", timeout_at=FAR, tags=TARGET, now=NOW)
    assert (claim["task"]["state"], claim["task"]["version"]) == ("acquired", 1)
    with pytest.raises(Conflict) as stale:
        tasks.task_release(id="job", version=0, now=NOW)
    assert stale.value.field == "version"
    done = tasks.task_fulfill(id="job", version=1, state="resolved", now=NOW + 5)
    assert done["state"] == "resolved"
    assert tasks.task_get(id="job", now=NOW + 6)["state"] == "fulfilled"


def test_a_suspended_task_is_told_to_keep_running_when_its_awaited_promise_settled(
    db: Any,
) -> None:
    tasks.task_create(pid="w1", ttl=30_000, id="root", timeout_at=FAR, tags=TARGET, now=NOW)
    promises.promise_create(id="child", timeout_at=FAR, tags=TARGET, now=NOW)
    assert tasks.task_suspend(id="root", version=1, awaited=["child"], now=NOW) is None
    assert Task.objects.get(pk="root").state == "suspended"


def test_schedules_through_the_services(db: Any) -> None:
    record = schedules.schedule_create(
        id="nightly",
        cron="0 3 * * *",
        promise_id="n/{{.timestamp}}",
        promise_timeout=60_000,
        now=NOW,
    )
    assert record["nextRunAt"] % 86_400_000 == 3 * 3_600_000
    occurrence, created = schedules.fire_now(id="nightly", now=NOW + 10)
    assert (occurrence["id"], created) == (f"n/{NOW + 10}", True)
    schedules.schedule_delete(id="nightly", now=NOW + 20)
    with pytest.raises(NotFound):
        schedules.schedule_get(id="nightly", now=NOW + 30)


def test_a_poll_address_delivery_cannot_route_is_refused_at_registration(db: Any) -> None:
    """One grammar for registration and delivery: ``poll://foo@g`` used to be accepted here and
    never delivered (its ``unblock`` waited forever)."""
    promises.promise_create(id="p", timeout_at=FAR, tags={"resonate:external": "true"}, now=NOW)
    with pytest.raises(InvalidRequest) as bad:
        promises.promise_register_listener(awaited="p", address="poll://foo@g", now=NOW)
    assert bad.value.field == "address"
    promises.promise_register_listener(awaited="p", address="poll://any@g/w1", now=NOW)
    assert list(Listener.objects.values_list("address", flat=True)) == ["poll://any@g/w1"]
    promises.promise_settle(id="p", state="resolved", now=NOW + 1)
    (message,) = Message.objects.all()
    assert (message.kind, message.address, message.poll_route) == (
        "unblock",
        "poll://any@g/w1",
        "g",
    )


def readme_example() -> dict[str, Any]:
    """The Python API page's example, run as written (its names, in a fresh namespace)."""
    code = block(PYTHON_API, "python-api-example").text
    head, _, _ = code.partition("try:\n")
    namespace: dict[str, Any] = {}
    exec(compile(head, PYTHON_API, "exec"), namespace)
    return namespace


def test_the_readme_example_commits_with_the_host_and_its_message_waits_for_commit(
    db: Any,
) -> None:
    place_order = readme_example()["place_order"]
    order = Group.objects.create(name="order")
    assert place_order(order) == "pending"
    assert Task.objects.filter(pk=f"order/{order.pk}/charge").exists()
    assert Message.objects.filter(kind="execute", task_id=f"order/{order.pk}/charge").exists()


def test_the_readme_example_rolls_back_with_the_host(db: Any) -> None:
    place_order = readme_example()["place_order"]

    def host_view() -> None:
        with transaction.atomic():
            place_order(Group.objects.create(name="order"))
            raise RuntimeError("the host's own write failed")

    with pytest.raises(RuntimeError):
        host_view()
    assert not Group.objects.exists()
    assert not Promise.objects.exists()
    assert not Task.objects.exists()
    assert not Message.objects.exists()


def test_the_readme_refusal_example_reports_status_and_field(
    db: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    code = block(PYTHON_API, "python-api-example").text
    exec(compile(code, PYTHON_API, "exec"), {})  # the whole example: the refusal is printed
    assert capsys.readouterr().out.split(maxsplit=1)[0] == "404"
    with pytest.raises(ProtocolError) as refused:
        promises.promise_settle(id="order/7/approval", state="resolved", now=NOW)
    assert (refused.value.status, refused.value.message) == (404, "promise not found")


def test_every_protocol_kind_has_one_typed_service_named_after_it() -> None:
    import inspect

    from resonate_project.edges.kinds import KINDS, PROTOCOL_KINDS

    apps = {"promise": "promises", "task": "tasks_app", "schedule": "schedules"}
    for name in PROTOCOL_KINDS:
        service = KINDS[name].service
        assert service is not None, f"{name} has no service in edges.kinds"
        noun, verb = name.split(".")
        assert (service.__module__, service.__name__) == (
            f"{apps[noun]}.services",
            f"{noun}_{verb}",
        )
        now = inspect.signature(service).parameters["now"]
        assert now.kind is inspect.Parameter.KEYWORD_ONLY, f"{name}: now is keyword-only"
    assert {k.name for k in KINDS.values() if k.debug} == {
        "debug.start",
        "debug.stop",
        "debug.reset",
        "debug.snap",
        "debug.tick",
    }
