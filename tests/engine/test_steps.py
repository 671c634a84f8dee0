"""The internal steps (spec digest §5): R1 promise timeout, R5 lease expiry, R6 retry, R7 schedule
fire, bounded batches, the keyed outbox, and concurrent sweepers on PostgreSQL.

Each step is ``(now, limit) -> count``; a test passes ``now`` and reads what a client or a worker
would see afterwards (records, task views, outbox rows). Times are ms.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.engine.steps import (
    lease_expiry,
    promise_timeouts,
    retry_dispatch,
    run_due,
    schedule_fire,
)
from tasks_app.models import Task
from tests.support.factories import FAR, Api

ADDRESS = "poll://any@workers"
TARGET = {"resonate:target": ADDRESS}
EXTERNAL = {"resonate:external": "true"}
TIMER = {"resonate:timer": "true"}
LISTENER = "poll://uni@workers/client-1"
RETRY = 5_000  # RETRY_TIMEOUT_MS default
BATCH = 100


def create_action(promise_id: str, timeout_at: int, tags: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "promise.create",
        "head": {},
        "data": {"id": promise_id, "timeoutAt": timeout_at, "param": {}, "tags": tags},
    }


def start_workflow(api: Api, task_id: str, ttl: int = 60_000, now: int = 1_000) -> None:
    res = api(
        "task.create", now=now, pid="worker-1", ttl=ttl, action=create_action(task_id, FAR, TARGET)
    )
    assert res.status == 200


def suspend_on(api: Api, task_id: str, version: int, awaited: str, now: int = 1_000) -> None:
    action = {
        "kind": "promise.register_callback",
        "head": {},
        "data": {"awaited": awaited, "awaiter": task_id},
    }
    assert api("task.suspend", now=now, id=task_id, version=version, actions=[action]).status == 200


def stored(promise_id: str) -> Promise:
    return Promise.objects.get(pk=promise_id)


def stored_task(task_id: str) -> Task:
    return Task.objects.get(pk=task_id)


def execute_for(task_id: str) -> Message | None:
    return Message.objects.filter(kind="execute", task_id=task_id).first()


def outbox_snapshot() -> dict[str, tuple[int | None, int]]:
    return {m.key: (m.version, m.revision) for m in Message.objects.all()}


# --- R1 promise timeout -----------------------------------------------------------------------


def test_r1_materialises_external_promises_only(api: Api) -> None:
    external = {
        "ext": EXTERNAL,
        "targeted": TARGET,
        "nap": TIMER,
        "global": {"resonate:scope": "global"},  # deviation: counted as external (TS SDK)
    }
    for promise_id, tags in external.items():
        api("promise.create", id=promise_id, timeoutAt=5_000, tags=tags)
    api("promise.create", id="local", timeoutAt=5_000, tags={"resonate:scope": "local"})
    api("promise.create", id="bare", timeoutAt=5_000, tags={})

    assert promise_timeouts(9_000, BATCH) == len(external)

    for promise_id in ("ext", "targeted", "global"):
        p = stored(promise_id)
        assert (p.state, p.settled_at) == ("rejected_timedout", 5_000), promise_id
    assert (stored("nap").state, stored("nap").settled_at) == ("resolved", 5_000)
    for promise_id in ("local", "bare"):
        assert stored(promise_id).state == "pending"
    record = api("promise.get", now=9_000, id="nap").data["promise"]
    assert record["value"] == {}  # a deadline settlement carries no value
    assert record["settledAt"] == record["timeoutAt"] == 5_000


def test_r1_fulfils_the_task_and_discharges_listeners_and_callbacks(api: Api) -> None:
    api("promise.create", id="job", timeoutAt=5_000, tags=TARGET)
    api("promise.register_listener", awaited="job", address=LISTENER)
    api("promise.register_listener", awaited="job", address="https://client.example/hook")
    start_workflow(api, "wf")
    suspend_on(api, "wf", 1, "job")

    assert promise_timeouts(5_000, BATCH) == 1

    task = stored_task("job")
    assert (task.state, task.pid, task.ttl, task.expires_at, task.retry_at, task.resumes) == (
        "fulfilled",
        None,
        None,
        None,
        None,
        [],
    )
    record = api("promise.get", now=5_000, id="job").data["promise"]
    unblocks = Message.objects.filter(kind="unblock").order_by("address")
    assert [(m.key, m.address, m.promise) for m in unblocks] == [
        ("job:notify:https://client.example/hook", "https://client.example/hook", record),
        (f"job:notify:{LISTENER}", LISTENER, record),
    ]
    assert not Listener.objects.exists()
    assert not Callback.objects.exists()
    woken = api("task.get", now=5_000, id="wf").data["task"]
    assert (woken["state"], woken["version"], woken["resumes"]) == ("pending", 1, 1)
    message = execute_for("wf")
    assert message is not None
    assert (message.version, message.address) == (1, ADDRESS)


def test_r1_is_idempotent(api: Api) -> None:
    api("promise.create", id="job", timeoutAt=5_000, tags=TARGET)
    api("promise.register_listener", awaited="job", address=LISTENER)
    start_workflow(api, "wf")
    suspend_on(api, "wf", 1, "job")
    assert promise_timeouts(5_000, BATCH) == 1
    outbox = outbox_snapshot()
    tasks = {t.pk: (t.state, t.version, t.retry_at) for t in Task.objects.all()}

    assert promise_timeouts(5_000, BATCH) == 0
    assert promise_timeouts(8_000, BATCH) == 0

    assert outbox_snapshot() == outbox
    assert {t.pk: (t.state, t.version, t.retry_at) for t in Task.objects.all()} == tasks
    assert stored("job").settled_at == 5_000


def test_r1_not_before_the_deadline_and_due_at_it(api: Api) -> None:
    api("promise.create", id="ext", timeoutAt=5_000, tags=EXTERNAL)
    api("promise.register_listener", awaited="ext", address=LISTENER)

    assert promise_timeouts(4_999, BATCH) == 0
    assert stored("ext").state == "pending"
    assert not Message.objects.exists()

    assert promise_timeouts(5_000, BATCH) == 1  # now == timeoutAt: already dead
    assert stored("ext").state == "rejected_timedout"
    assert Message.objects.filter(kind="unblock").count() == 1


# --- R5 lease expiry --------------------------------------------------------------------------


def test_r5_an_expired_lease_returns_the_task_to_pending_and_offers_it_again(api: Api) -> None:
    start_workflow(api, "wf", ttl=2_000)  # acquired v1 at 1000, lease until 3000

    assert lease_expiry(2_999, BATCH) == 0
    assert stored_task("wf").state == "acquired"
    assert execute_for("wf") is None

    assert lease_expiry(3_000, BATCH) == 1
    assert api("task.get", now=3_000, id="wf").data["task"] == {
        "id": "wf",
        "state": "pending",
        "version": 1,
        "resumes": 0,
    }
    task = stored_task("wf")
    assert (task.pid, task.ttl, task.expires_at) == (None, None, None)
    assert task.retry_at == 3_000 + RETRY
    message = execute_for("wf")
    assert message is not None
    assert (message.version, message.address) == (1, ADDRESS)
    assert api("task.acquire", now=3_000, id="wf", version=1, pid="worker-2", ttl=1).status == 200


def test_r5_a_heartbeat_extended_lease_does_not_expire(api: Api) -> None:
    start_workflow(api, "wf", ttl=2_000)  # lease until 3000
    api("task.heartbeat", now=2_500, pid="worker-1", tasks=[{"id": "wf", "version": 1}])

    assert lease_expiry(3_500, BATCH) == 0
    assert api("task.get", now=3_500, id="wf").data["task"]["state"] == "acquired"
    assert execute_for("wf") is None

    assert lease_expiry(4_500, BATCH) == 1
    assert api("task.get", now=4_500, id="wf").data["task"]["state"] == "pending"


# --- R6 retry / dispatch ----------------------------------------------------------------------


def test_r6_a_pending_task_is_offered_again_every_retry_timeout(api: Api) -> None:
    api("promise.create", now=1_000, id="job", timeoutAt=FAR, tags=TARGET)
    first = execute_for("job")
    assert first is not None
    revisions = [first.revision]
    assert stored_task("job").retry_at == 1_000 + RETRY

    assert retry_dispatch(1_000 + RETRY - 1, BATCH) == 0
    offer = execute_for("job")
    assert offer is not None
    assert offer.revision == revisions[-1]

    for due in (1_000 + RETRY, 1_000 + 2 * RETRY):
        assert retry_dispatch(due, BATCH) == 1
        offer = execute_for("job")
        assert offer is not None
        assert (offer.version, offer.address) == (0, ADDRESS)
        assert offer.revision > revisions[-1]
        revisions.append(offer.revision)
        assert stored_task("job").retry_at == due + RETRY
    assert Message.objects.filter(kind="execute").count() == 1


def test_r6_an_empty_target_is_rearmed_without_a_message(api: Api) -> None:
    api("promise.create", now=1_000, id="job", timeoutAt=FAR, tags={"resonate:target": ""})
    assert not Message.objects.exists()

    assert retry_dispatch(1_000 + RETRY, BATCH) == 1

    assert stored_task("job").retry_at == 1_000 + 2 * RETRY
    assert not Message.objects.exists()


# --- R7 schedule fire -------------------------------------------------------------------------

MINUTE = 60_000


def create_schedule(api: Api, promise_timeout: int, tags: dict[str, str] | None = None) -> None:
    res = api(
        "schedule.create",
        now=1_000,
        id="nightly",
        cron="* * * * *",
        promiseId="{{.id}}-{{.timestamp}}",
        promiseTimeout=promise_timeout,
        promiseParam={"data": "cGF5bG9hZA=="},
        promiseTags={**TARGET, "app": "billing"} if tags is None else tags,
    )
    assert res.status == 200
    assert res.data["schedule"]["nextRunAt"] == MINUTE


def test_r7_first_fire_at_next_run_at(api: Api) -> None:
    create_schedule(api, promise_timeout=30_000)

    assert schedule_fire(MINUTE - 1, BATCH) == 0
    assert not Promise.objects.exists()

    assert schedule_fire(MINUTE, BATCH) == 1

    occurrence = api("promise.get", now=MINUTE, id=f"nightly-{MINUTE}").data["promise"]
    assert occurrence == {
        "id": f"nightly-{MINUTE}",
        "state": "pending",
        "param": {"data": "cGF5bG9hZA=="},
        "value": {},
        "tags": {
            **TARGET,
            "app": "billing",
            "resonate:schedule": "nightly",
            "resonate:origin": f"nightly-{MINUTE}",
            "resonate:branch": f"nightly-{MINUTE}",
            "resonate:parent": f"nightly-{MINUTE}",
            "resonate:prefix": f"nightly-{MINUTE}",
        },
        "timeoutAt": MINUTE + 30_000,
        "createdAt": MINUTE,
    }
    task = api("task.get", now=MINUTE, id=f"nightly-{MINUTE}").data["task"]
    assert (task["state"], task["version"]) == ("pending", 0)
    message = execute_for(f"nightly-{MINUTE}")
    assert message is not None
    assert (message.version, message.address) == (0, ADDRESS)
    schedule = api("schedule.get", now=MINUTE, id="nightly").data["schedule"]
    assert (schedule["lastRunAt"], schedule["nextRunAt"]) == (MINUTE, 2 * MINUTE)


def test_r7_catches_up_every_missed_occurrence(api: Api) -> None:
    create_schedule(api, promise_timeout=100_000)
    now = 4 * MINUTE + 10_000  # occurrences at 1, 2, 3 and 4 minutes were missed

    assert schedule_fire(now, BATCH) == 4

    for minute in (1, 2, 3, 4):
        instant = minute * MINUTE
        record = api("promise.get", now=now, id=f"nightly-{instant}").data["promise"]
        assert (record["createdAt"], record["timeoutAt"]) == (instant, instant + 100_000)
    # 1 and 2 minutes: their deadlines (160000, 220000) passed during the backlog.
    for instant in (MINUTE, 2 * MINUTE):
        record = api("promise.get", now=now, id=f"nightly-{instant}").data["promise"]
        assert (record["state"], record["settledAt"]) == ("rejected_timedout", instant + 100_000)
        task = api("task.get", now=now, id=f"nightly-{instant}").data["task"]
        assert task["state"] == "fulfilled"
        assert execute_for(f"nightly-{instant}") is None
    for instant in (3 * MINUTE, 4 * MINUTE):
        record = api("promise.get", now=now, id=f"nightly-{instant}").data["promise"]
        assert record["state"] == "pending"
        message = execute_for(f"nightly-{instant}")
        assert message is not None
        assert message.version == 0
    schedule = api("schedule.get", now=now, id="nightly").data["schedule"]
    assert (schedule["lastRunAt"], schedule["nextRunAt"]) == (4 * MINUTE, 5 * MINUTE)


def test_r7_is_idempotent(api: Api) -> None:
    create_schedule(api, promise_timeout=100_000)
    now = 3 * MINUTE
    assert schedule_fire(now, BATCH) == 3
    promises = {p.pk: (p.state, p.created_at) for p in Promise.objects.all()}
    outbox = outbox_snapshot()

    assert schedule_fire(now, BATCH) == 0

    assert {p.pk: (p.state, p.created_at) for p in Promise.objects.all()} == promises
    assert outbox_snapshot() == outbox
    schedule = api("schedule.get", now=now, id="nightly").data["schedule"]
    assert (schedule["lastRunAt"], schedule["nextRunAt"]) == (3 * MINUTE, 4 * MINUTE)
    assert schedule_fire(4 * MINUTE, BATCH) == 1
    assert Promise.objects.count() == 4


# --- bounded batches --------------------------------------------------------------------------


def test_promise_timeouts_work_in_bounded_batches(api: Api) -> None:
    for i in range(7):
        api("promise.create", id=f"ext-{i}", timeoutAt=5_000, tags=EXTERNAL)

    assert promise_timeouts(5_000, 3) == 3
    assert Promise.objects.filter(state="rejected_timedout").count() == 3

    assert run_due(5_000, 3) == 4
    assert Promise.objects.filter(state="rejected_timedout").count() == 7


def test_retry_dispatch_works_in_bounded_batches(api: Api) -> None:
    for i in range(7):
        api("promise.create", now=1_000, id=f"job-{i}", timeoutAt=FAR, tags=TARGET)
    due = 1_000 + RETRY

    assert retry_dispatch(due, 3) == 3
    assert Task.objects.filter(retry_at=due + RETRY).count() == 3

    run_due(due, 3)
    assert Task.objects.filter(retry_at=due + RETRY).count() == 7
    assert sorted(m.revision for m in Message.objects.all()) == [2] * 7


# --- the keyed outbox -------------------------------------------------------------------------


def test_a_newer_execute_replaces_the_older_one(api: Api) -> None:
    api("promise.create", now=1_000, id="job", timeoutAt=FAR, tags=TARGET)
    api("task.acquire", now=1_000, id="job", version=0, pid="worker-1", ttl=60_000)
    older = execute_for("job")
    assert older is not None
    assert older.version == 0

    api("task.release", now=2_000, id="job", version=1)

    rows = list(Message.objects.filter(task_id="job"))
    assert len(rows) == 1
    assert (rows[0].key, rows[0].version) == ("job", 1)
    assert rows[0].revision > older.revision


# --- concurrent sweepers (PostgreSQL) ---------------------------------------------------------


def sweep_concurrently(step: Callable[[int, int], int], now: int, limit: int) -> list[int]:
    """Two sweepers start together behind a barrier, each on its own connection, and run ``step``
    until it finds nothing; returns what each processed."""
    barrier = threading.Barrier(2)
    counts: list[int] = []
    errors: list[BaseException] = []

    def sweeper() -> None:
        try:
            barrier.wait(timeout=30)
            total = 0
            while (n := step(now, limit)) > 0:
                total += n
            counts.append(total)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweeper) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(counts) == 2
    return counts


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_timeout_sweepers_never_settle_the_same_promise_twice(api: Api) -> None:
    n = 60
    for i in range(n):
        api("promise.create", id=f"ext-{i:03}", timeoutAt=5_000, tags=EXTERNAL)
        api("promise.register_listener", awaited=f"ext-{i:03}", address=LISTENER)

    counts = sweep_concurrently(promise_timeouts, 5_000, 7)

    assert sum(counts) == n
    assert Promise.objects.filter(state="rejected_timedout", settled_at=5_000).count() == n
    unblocks = Message.objects.filter(kind="unblock")
    assert unblocks.count() == n
    assert {m.revision for m in unblocks} == {1}  # each listener was discharged exactly once


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_retry_sweepers_never_dispatch_the_same_task_twice(api: Api) -> None:
    n = 60
    for i in range(n):
        api("promise.create", now=1_000, id=f"job-{i:03}", timeoutAt=FAR, tags=TARGET)
    due = 1_000 + RETRY

    counts = sweep_concurrently(retry_dispatch, due, 7)

    assert sum(counts) == n
    assert Task.objects.filter(retry_at=due + RETRY).count() == n
    assert {m.revision for m in Message.objects.filter(kind="execute")} == {2}


@pytest.mark.django_db
def test_the_timeout_sweep_names_the_terms_of_the_index_it_reads() -> None:
    """R1 reads ``promise_armed_timeout``; a database uses a partial index only for a query whose
    condition implies the index's, so the sweep's condition comes from the model's index."""
    from resonate_project.engine.steps import _armed, index_condition

    index = index_condition(Promise, "promise_armed_timeout")
    assert '"external"' in index
    assert "\"state\" = 'pending'" in index
    swept = _armed(connection.vendor)
    if connection.vendor == "postgresql":
        assert swept == index
    else:
        # Both Django renderings of the boolean term, and the state term (inside likelihood()).
        assert '"external"' in swept
        assert '"external" = 1' in swept
        assert "\"state\" = 'pending'" in swept
        assert "\"state\" = 'pending'" in index
    with connection.cursor() as cursor:  # the condition is valid SQL on this database
        cursor.execute(f'SELECT count(*) FROM "promises_promise" WHERE {swept}')
        assert cursor.fetchone() == (0,)
