"""``promise_settled`` and ``task_completed`` (docs/reference/python-api.md#signals): sent once
the settling transaction commits, by every path that settles (a request, the timeout step),
never for work that rolled back, and a failing receiver reaches nobody else."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction

from promises import services as promises
from promises.models import Promise
from resonate_project.core.signals import promise_settled, task_completed
from resonate_project.engine.steps import run_due
from tasks_app.models import Task

pytestmark = pytest.mark.django_db(transaction=True)  # real commits: on_commit runs

TARGET = {"resonate:target": "poll://any@billing"}


@pytest.fixture
def heard() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []

    def on_settled(sender: Any, **kwargs: Any) -> None:
        assert sender is Promise
        events.append(("promise_settled", {k: kwargs[k] for k in ("id", "state", "settled_at")}))

    def on_completed(sender: Any, **kwargs: Any) -> None:
        assert sender is Task
        events.append(("task_completed", {k: kwargs[k] for k in ("id", "state")}))

    promise_settled.connect(on_settled)
    task_completed.connect(on_completed)
    yield events
    promise_settled.disconnect(on_settled)
    task_completed.disconnect(on_completed)


def test_a_settlement_is_heard_after_the_hosts_commit(heard: list[Any]) -> None:
    with transaction.atomic():
        promises.promise_create(id="order/1", timeout_at=10**13, tags=TARGET, now=1_000)
        promises.promise_settle(id="order/1", state="resolved", now=2_000)
        assert heard == []  # not before the host's own transaction commits
    assert heard == [
        ("promise_settled", {"id": "order/1", "state": "resolved", "settled_at": 2_000}),
        ("task_completed", {"id": "order/1", "state": "resolved"}),
    ]


def test_a_rolled_back_settlement_is_never_heard(heard: list[Any]) -> None:
    promises.promise_create(id="order/2", timeout_at=10**13, now=1_000)

    def host_view() -> None:
        with transaction.atomic():
            promises.promise_settle(id="order/2", state="rejected", now=2_000)
            raise RuntimeError("the host's own write failed")

    with pytest.raises(RuntimeError):
        host_view()
    assert heard == []
    assert Promise.objects.get(pk="order/2").state == "pending"


def test_a_timeout_applied_by_the_steps_is_heard(heard: list[Any]) -> None:
    promises.promise_create(
        id="order/3", timeout_at=5_000, tags={"resonate:external": "true"}, now=1_000
    )
    run_due(now=6_000, limit=100)
    assert heard == [
        ("promise_settled", {"id": "order/3", "state": "rejected_timedout", "settled_at": 5_000})
    ]


def test_a_failing_receiver_reaches_neither_the_caller_nor_other_receivers(
    heard: list[Any],
) -> None:
    def broken(sender: Any, **kwargs: Any) -> None:
        raise ValueError("the host's receiver is broken")

    promise_settled.connect(broken)
    try:
        promises.promise_create(id="order/4", timeout_at=10**13, now=1_000)
        record = promises.promise_settle(id="order/4", state="resolved", now=2_000)
    finally:
        promise_settled.disconnect(broken)
    assert record["state"] == "resolved"
    assert [name for name, _ in heard] == ["promise_settled"]


def test_settlements_outside_any_transaction_are_heard_once_whatever_the_promise(
    heard: list[Any],
) -> None:
    # A plain promise settles in one autocommit statement; a targeted one in the unit of work
    # (its task is completed with it). Both are heard exactly once, after their commit.
    promises.promise_create(id="plain/1", timeout_at=10**13, now=1_000)
    promises.promise_create(id="order/5", timeout_at=10**13, tags=TARGET, now=1_000)
    assert promises.promise_settle(id="plain/1", state="resolved", now=2_000)["state"] == "resolved"
    assert promises.promise_settle(id="order/5", state="rejected", now=2_000)["state"] == "rejected"
    again = promises.promise_settle(id="plain/1", state="rejected", now=3_000)
    assert (again["state"], again["settledAt"]) == ("resolved", 2_000)  # the first verdict won
    assert heard == [
        ("promise_settled", {"id": "plain/1", "state": "resolved", "settled_at": 2_000}),
        ("promise_settled", {"id": "order/5", "state": "rejected", "settled_at": 2_000}),
        ("task_completed", {"id": "order/5", "state": "rejected"}),
    ]
    assert Task.objects.get(promise_id="order/5").state == "fulfilled"
