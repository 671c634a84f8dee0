"""Prometheus metrics (docs/how-to/observability.md): values after known traffic, drains and steps;
the database gauges; who may read ``/metrics``.

Counters are process-wide, so each test compares a series before and after what it does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client, override_settings
from prometheus_client import REGISTRY

from outbox import delivery
from outbox.hub import Hub
from outbox.models import PUSH_Q, Message
from outbox.push import drain_push
from promises.models import Promise
from resonate_project.access.credentials import credential_create
from resonate_project.core.clock import now_ms
from resonate_project.edges.kinds import KINDS
from resonate_project.engine import outbox as enqueue
from resonate_project.engine.steps import run_due
from resonate_project.observability import export
from resonate_project.observability.metrics import REQUEST_KINDS, record_request
from tests.security.test_push import Receiver, push_settings
from tests.support.factories import FAR, Api

VERSION = "2026-04-01"


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def post(client: Client, kind: str, data: Any) -> int:
    body = {"kind": kind, "head": {"corrId": "c", "version": VERSION}, "data": data}
    return client.post("/", json.dumps(body), content_type="application/json").status_code


def gauges(families: list[Any]) -> dict[tuple[str, tuple[str, ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.values()))): s.value for f in families for s in f.samples
    }


# --- requests -----------------------------------------------------------------------------------


def test_requests_are_counted_by_kind_and_status(db: Any, client: Client) -> None:
    series = [
        ("resonate_request_total", {"kind": "promise.create", "status": "200"}),
        ("resonate_request_total", {"kind": "promise.get", "status": "200"}),
        ("resonate_request_total", {"kind": "promise.get", "status": "404"}),
        ("resonate_request_duration_seconds_count", {"kind": "promise.get"}),
        ("resonate_request_duration_seconds_count", {"kind": "promise.create"}),
    ]
    before = [value(name, **labels) for name, labels in series]

    for i in range(3):
        assert post(client, "promise.create", {"id": f"m{i}", "timeoutAt": FAR}) == 200
    assert post(client, "promise.get", {"id": "m0"}) == 200
    assert post(client, "promise.get", {"id": "absent"}) == 404
    assert post(client, "promise.get", {"id": "absent-too"}) == 404

    after = [value(name, **labels) for name, labels in series]
    assert [a - b for a, b in zip(after, before, strict=True)] == [3, 1, 2, 3, 3]


def test_a_kind_the_server_does_not_know_is_labelled_other(db: Any, client: Client) -> None:
    before = value("resonate_request_total", kind="other", status="400")
    for i in range(3):
        assert post(client, f"made.up.{i}", {}) == 400
    assert value("resonate_request_total", kind="other", status="400") - before == 3
    assert value("resonate_request_total", kind="made.up.0", status="400") == 0


def test_the_labelled_kinds_are_the_dispatch_tables_kinds() -> None:
    assert {*KINDS, ""} == REQUEST_KINDS


def test_nothing_is_recorded_with_metrics_off(db: Any, client: Client) -> None:
    labels = {"kind": "promise.create", "status": "200"}
    before = value("resonate_request_total", **labels)
    with override_settings(RESONATE={"METRICS": False}):
        assert post(client, "promise.create", {"id": "off", "timeoutAt": FAR}) == 200
        record_request("promise.create", 200, 0.001)
    assert value("resonate_request_total", **labels) == before


# --- the outbox and its delivery ----------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def test_messages_and_push_deliveries_are_counted_after_a_drain(
    db: Any, receiver: Receiver
) -> None:
    series = [
        ("resonate_messages_total", {"kind": "unblock"}),
        ("resonate_deliveries_total", {"status": "delivered", "transport": "push"}),
        ("resonate_deliveries_total", {"status": "failed", "transport": "push"}),
        ("resonate_redeliveries_total", {"transport": "push"}),
    ]
    before = [value(name, **labels) for name, labels in series]
    now = now_ms()
    with push_settings():
        with transaction.atomic():
            for i in range(5):
                enqueue.unblock({"id": f"u{i}"}, receiver.url(), now)
            # Nothing listens at port 9 of loopback: a failed attempt, retried later.
            enqueue.unblock({"id": "lost"}, "http://127.0.0.1:9/hook", now)
        assert drain_push(100) == 6
    after = [value(name, **labels) for name, labels in series]
    assert [a - b for a, b in zip(after, before, strict=True)] == [6, 5, 1, 1]
    assert len(receiver.got) == 5
    assert value("resonate_push_in_flight") == 0


def test_sse_confirmations_and_give_backs_are_counted(db: Any) -> None:
    delivered = {"status": "delivered", "transport": "sse"}
    before = (
        value("resonate_deliveries_total", **delivered),
        value("resonate_redeliveries_total", transport="sse"),
    )
    now = now_ms()
    for i in range(3):
        enqueue.execute(f"t{i}", 1, "poll://any@g", now)
    items = delivery.claim(~PUSH_Q, now, 10)
    assert len(items) == 3
    hub = Hub(now_ms, autostart=False)
    hub.ack(items[:2])
    hub.release_later(items[2:])
    hub.run_once()
    after = (
        value("resonate_deliveries_total", **delivered),
        value("resonate_redeliveries_total", transport="sse"),
    )
    assert (after[0] - before[0], after[1] - before[1]) == (2, 1)


def test_the_outbox_gauges_count_waiting_due_and_dead_messages(db: Any) -> None:
    now = 1_000_000
    enqueue.execute("sse-due", 1, "poll://any@g", now - 4_000)
    enqueue.execute("sse-later", 1, "poll://any@g", now + 9_000)
    enqueue.unblock({"id": "p"}, "http://hooks.example.com/a", now - 2_500)
    enqueue.unblock({"id": "q"}, "http://hooks.example.com/b", now)
    Message.objects.filter(key="q:notify:http://hooks.example.com/b").update(dead_at=now)

    got = gauges(export.outbox_gauges(now))

    assert got[("resonate_outbox_messages", ("sse",))] == 2
    assert got[("resonate_outbox_messages", ("push",))] == 1
    assert got[("resonate_outbox_oldest_due_seconds", ("sse",))] == 4.0
    assert got[("resonate_outbox_oldest_due_seconds", ("push",))] == 2.5
    assert got[("resonate_dead_letters", ())] == 1


def test_promises_and_tasks_are_counted_by_projected_state(api: Api) -> None:
    target = {"resonate:target": "poll://any@g"}
    assert api("promise.create", id="live", timeoutAt=FAR).status == 200
    assert api("promise.create", id="late", timeoutAt=5_000).status == 200
    timer = {"resonate:timer": "true"}
    assert api("promise.create", id="timer", timeoutAt=5_000, tags=timer).status == 200
    assert api("promise.create", id="job", timeoutAt=FAR, tags=target).status == 200
    assert api("promise.create", id="late-job", timeoutAt=5_000, tags=target).status == 200

    got = gauges(export.state_gauges(now=10_000))

    assert got[("resonate_promises", ("pending",))] == 2  # live, job
    assert got[("resonate_promises", ("rejected_timedout",))] == 2  # late, late-job
    assert got[("resonate_promises", ("resolved",))] == 1  # timer
    assert got[("resonate_tasks", ("pending",))] == 1
    assert got[("resonate_tasks", ("fulfilled",))] == 1
    assert Promise.objects.count() == 5


def test_the_database_gauges_are_cached_between_scrapes(db: Any) -> None:
    collector = export.DatabaseCollector()
    enqueue.execute("first", 1, "poll://any@g", 0)
    first = gauges(list(collector.collect()))
    enqueue.execute("second", 1, "poll://any@g", 0)
    again = gauges(list(collector.collect()))
    assert first[("resonate_outbox_messages", ("sse",))] == 1
    assert again == first


# --- steps --------------------------------------------------------------------------------------


def test_steps_record_runs_rows_and_lag(api: Api) -> None:
    external = {"resonate:external": "true"}
    for i in range(2):
        assert api("promise.create", id=f"t{i}", timeoutAt=5_000, tags=external).status == 200
    step = {"step": "promise_timeouts"}
    before = (
        value("resonate_step_rows_total", **step),
        value("resonate_step_duration_seconds_count", **step),
        value("resonate_step_lag_seconds_count", **step),
        value("resonate_step_lag_seconds_sum", **step),
    )
    assert run_due(now=7_000, limit=100) == 2
    after = (
        value("resonate_step_rows_total", **step),
        value("resonate_step_duration_seconds_count", **step),
        value("resonate_step_lag_seconds_count", **step),
        value("resonate_step_lag_seconds_sum", **step),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [2, 1, 2, pytest.approx(4.0)]


def test_schedule_occurrences_are_counted(api: Api) -> None:
    minute = 60_000
    start = 1_700_000_000_000 // minute * minute
    schedule = {
        "id": "every-minute",
        "cron": "* * * * *",
        "promiseId": "{{.id}}-{{.timestamp}}",
        "promiseTimeout": 3_600_000,
    }
    assert api("schedule.create", now=start, **schedule).status == 200
    before = value("resonate_schedule_promises_total")
    lag_before = value("resonate_step_lag_seconds_count", step="schedule_fire")
    run_due(now=start + 3 * minute + 500, limit=100)
    assert value("resonate_schedule_promises_total") - before == 3
    assert value("resonate_step_lag_seconds_count", step="schedule_fire") - lag_before == 3


# --- who may read /metrics ----------------------------------------------------------------------


@pytest.fixture
def auth_required(db: Any) -> Iterator[None]:
    with override_settings(RESONATE={"AUTH": "required"}):
        yield


def test_metrics_are_open_when_auth_is_off(db: Any, client: Client) -> None:
    assert post(client, "promise.get", {"id": "absent"}) == 404
    res = client.get("/metrics")
    assert res.status_code == 200
    assert res["Content-Type"].startswith("text/plain")
    text = res.content.decode()
    assert 'resonate_request_total{kind="promise.get",status="404"}' in text
    assert "resonate_outbox_messages" in text


def test_metrics_need_a_credential_when_auth_is_required(
    auth_required: None, client: Client
) -> None:
    res = client.get("/metrics")
    assert res.status_code == 401
    assert res["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": "Bearer rsn_wrong"}).status_code == 401


@pytest.mark.parametrize("prefix", ["", "billing/"])
def test_any_valid_credential_reads_the_metrics(
    auth_required: None, client: Client, prefix: str
) -> None:
    _, token = credential_create(name="scraper", now=now_ms(), prefix=prefix)
    res = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert res.status_code == 200
    assert b"resonate_request_total" in res.content or b"resonate_request_duration" in res.content


@pytest.mark.parametrize(("staff", "status"), [(True, 200), (False, 401)])
def test_a_staff_session_reads_the_metrics(
    auth_required: None, client: Client, staff: bool, status: int
) -> None:
    user = User.objects.create_user("op", password="x", is_staff=staff)
    client.force_login(user)
    assert client.get("/metrics").status_code == status
