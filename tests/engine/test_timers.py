"""Timers fire at their deadline, not at the next tick: the next deadline is read from the steps'
indexes, a commit that writes an earlier one wakes the step runner, and under Celery one
``resonate.tick`` is planned for it. No test here measures time: each runs with a tick so long
(``TICK_INTERVAL_MS`` 60 s) that only the deadline could have woken anything."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings

from promises.models import Listener, Promise
from resonate_project.core.clock import now_ms
from resonate_project.core.signals import promise_settled
from resonate_project.engine import wake
from resonate_project.engine.steps import next_due
from resonate_project.runtime import ticker
from tests.support.factories import FAR, Api

LONG_TICK = {"TICK_INTERVAL_MS": 60_000}
TIMER = {"resonate:timer": "true"}
EXTERNAL = {"resonate:external": "true"}
TARGET = {"resonate:target": "poll://any@workers"}


def create(api: Api, id: str, timeout_at: int, tags: dict[str, str], now: int = 1_000) -> None:
    res = api("promise.create", now=now, id=id, timeoutAt=timeout_at, param={}, tags=tags)
    assert res.status == 200, res


@pytest.fixture
def heard() -> Iterator[list[int]]:
    """The deadlines the step runner would hear, in commit order."""
    got: list[int] = []
    wake.subscribe_deadlines(got.append)
    yield got
    wake.unsubscribe_deadlines(got.append)


# --- the next deadline ---------------------------------------------------------------------------


def test_nothing_armed_means_no_deadline(api: Api) -> None:
    create(api, "internal", 2_000, {})  # an internal promise's deadline is projection only (C1)
    assert next_due() is None


def test_the_next_deadline_is_the_earliest_of_every_kind(api: Api) -> None:
    create(api, "far", 90_000, EXTERNAL)
    assert next_due() == 90_000
    create(api, "timer", 50_000, TIMER)
    assert next_due() == 50_000
    res = api(
        "schedule.create",
        now=1_000,
        id="s",
        cron="* * * * *",
        promiseId="s.{{.timestamp}}",
        promiseTimeout=1_000,
        promiseParam={},
        promiseTags={},
    )
    assert res.status == 200
    assert next_due() == 50_000  # the schedule's first run is at 60,000
    action = {
        "kind": "promise.create",
        "head": {},
        "data": {"id": "wf", "timeoutAt": FAR, "param": {}, "tags": TARGET},
    }
    assert api("task.create", now=1_000, pid="w", ttl=10_000, action=action).status == 200
    assert next_due() == 11_000  # the lease expiry
    create(api, "queued", FAR, TARGET)  # pending, dispatched at once: offered again at +5 s
    assert next_due() == 6_000


def test_a_settled_promise_leaves_no_deadline_behind(api: Api) -> None:
    create(api, "p", 5_000, EXTERNAL)
    res = api("promise.settle", now=1_100, id="p", state="resolved", value={})
    assert res.status == 200
    assert next_due() is None


# --- wake-ups after commit (real commits: on_commit runs) ----------------------------------------


@pytest.mark.django_db(transaction=True)
@override_settings(RESONATE=LONG_TICK)
def test_a_deadline_before_the_next_tick_wakes_the_runner_once_committed(
    api: Api, heard: list[int]
) -> None:
    with transaction.atomic():
        create(api, "soon", 1_300, TIMER)
        assert heard == []  # not before the commit
    assert heard == [1_300]


@pytest.mark.django_db(transaction=True)
@override_settings(RESONATE=LONG_TICK)
def test_a_deadline_after_the_next_tick_wakes_nobody(api: Api, heard: list[int]) -> None:
    create(api, "later", 1_000 + 60_000, TIMER)
    create(api, "internal", 1_300, {})  # no armed deadline
    assert heard == []


@pytest.mark.django_db(transaction=True)
@override_settings(RESONATE=LONG_TICK)
def test_one_wake_up_per_transaction_for_its_earliest_deadline(api: Api, heard: list[int]) -> None:
    with transaction.atomic():
        create(api, "b", 1_500, EXTERNAL)
        create(api, "a", 1_200, EXTERNAL)
        create(api, "c", 1_900, EXTERNAL)
    assert heard == [1_200]


@pytest.mark.django_db(transaction=True)
@override_settings(RESONATE=LONG_TICK)
def test_a_rolled_back_deadline_wakes_nobody(api: Api, heard: list[int]) -> None:
    class Abandon(Exception):
        pass

    def abandoned() -> None:
        with transaction.atomic():
            create(api, "gone", 1_300, TIMER)
            raise Abandon

    with pytest.raises(Abandon):
        abandoned()
    assert heard == []


@pytest.mark.django_db(transaction=True)
@override_settings(RESONATE={"TICK_INTERVAL_MS": 1_000, "RETRY_TIMEOUT_MS": 200})
def test_a_short_retry_and_short_leases_wake_the_runner(api: Api, heard: list[int]) -> None:
    create(api, "queued", FAR, TARGET)  # dispatched at once, offered again at +200 ms
    assert api("task.acquire", now=1_050, id="queued", version=0, pid="w", ttl=300).status == 200
    beat = api("task.heartbeat", now=1_100, pid="w", tasks=[{"id": "queued", "version": 1}])
    assert beat.status == 200
    action = {
        "kind": "promise.create",
        "head": {},
        "data": {"id": "wf", "timeoutAt": FAR, "param": {}, "tags": TARGET},
    }
    assert api("task.create", now=1_500, pid="w", ttl=400, action=action).status == 200
    assert heard == [1_200, 1_350, 1_400, 1_900]


# --- the runner plans its next pass --------------------------------------------------------------

TICK_AT = 61_000  # the next full pass after one at 1,000 with the minute's tick


@override_settings(RESONATE=LONG_TICK)
def test_a_timer_due_in_300_ms_fires_at_its_deadline_not_at_the_tick(api: Api) -> None:
    create(api, "t", 1_300, TIMER)
    rows, due = ticker.run_pass(1_000)
    assert (rows, due) == (0, 1_300)
    wake_at = ticker.next_pass_at(1_000, rows, due, TICK_AT)
    assert wake_at == 1_300  # not 61,000
    assert ticker.run_pass(wake_at, full=False) == (1, None)
    assert Promise.objects.get(id="t").state == "resolved"


@override_settings(RESONATE=LONG_TICK)
def test_with_nothing_armed_the_runner_waits_for_the_tick(api: Api) -> None:
    rows, due = ticker.run_pass(1_000)
    assert ticker.next_pass_at(1_000, rows, due, TICK_AT) == TICK_AT


def test_rows_due_that_a_pass_could_not_claim_are_retried_after_a_pause_not_at_once() -> None:
    # Another sweeper holds them (SKIP LOCKED): no busy loop.
    assert ticker.next_pass_at(1_000, 0, 900, TICK_AT) == 1_000 + ticker.STUCK_BACKOFF_MS
    # A pass that did work and left due rows (they came due meanwhile) goes again at once.
    assert ticker.next_pass_at(1_000, 3, 900, TICK_AT) == 900


@override_settings(RESONATE=LONG_TICK)
def test_a_deadline_pass_runs_only_the_steps_that_are_due(api: Api) -> None:
    create(api, "t", 1_300, TIMER)
    create(api, "queued", FAR, TARGET)  # offered again at 6,000
    Listener.objects.create(awaited=Promise.objects.get(id="queued"), address="x", ready=True)
    assert ticker.run_pass(1_300, full=False) == (1, 6_000)  # the timer only
    assert Listener.objects.filter(ready=True).exists()  # the drain waits for the tick
    assert ticker.run_pass(1_400, full=True)[0] == 1
    assert not Listener.objects.exists()


# --- the runner thread ---------------------------------------------------------------------------


def wait_for(probe: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Generous, and never asserts a duration: the long tick is what would miss it."""
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
@override_settings(RESONATE=LONG_TICK)
def test_the_runner_thread_wakes_for_a_timer_committed_while_it_sleeps(api: Api) -> None:
    # Heard through the host's signal, so this thread stays off the database while the runner
    # writes (SQLite's shared in-memory test database refuses concurrent access).
    fired = threading.Event()

    def on_settled(sender: Any, id: str, **kwargs: Any) -> None:
        if id == "t":
            fired.set()

    promise_settled.connect(on_settled)
    runner = ticker.start()
    try:
        # Let its first pass end: from then on it sleeps for the 60 s tick.
        wait_for(lambda: now_ms() + 30_000 < runner._wake_at < ticker.NEVER, "the runner to sleep")
        now = now_ms()
        create(api, "t", now + 300, TIMER, now=now)
        assert fired.wait(30), "the timer did not fire (the runner slept on to the tick)"
    finally:
        runner.stop()
        promise_settled.disconnect(on_settled)
    assert Promise.objects.get(id="t").state == "resolved"


# --- Celery: one planned tick --------------------------------------------------------------------


@pytest.fixture
def local_plans(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """No Redis: plans are kept in-process. The ticks queued are recorded, not sent."""
    sent: list[dict[str, Any]] = []

    class App:
        def send_task(self, name: str, **options: Any) -> None:
            sent.append({"name": name, **options})

    monkeypatch.setattr(wake, "redis_url", lambda: "")
    monkeypatch.setattr(wake, "celery_app", lambda: App())
    wake._planned_here.clear()
    yield sent
    wake._planned_here.clear()


@override_settings(RESONATE=LONG_TICK)
def test_one_tick_is_planned_for_the_earliest_deadline(local_plans: list[dict[str, Any]]) -> None:
    wake.plan_tick(1_300, 1_000)
    wake.plan_tick(1_400, 1_000)  # the tick at 1,300 will plan the next
    wake.plan_tick(1_300, 1_000)
    wake.plan_tick(1_200, 1_000)  # earlier: planned too
    wake.plan_tick(70_000, 1_000)  # beat ticks before then
    assert [(s["name"], s["kwargs"]) for s in local_plans] == [
        ("resonate.tick", {"at": 1_300}),
        ("resonate.tick", {"at": 1_200}),
    ]
    # Queued a few ms ahead: the task waits out the rest itself.
    assert local_plans[0]["eta"].timestamp() == (1_300 - wake.PLAN_LEAD_MS) / 1000


@override_settings(RESONATE=LONG_TICK)
def test_a_tick_that_ran_makes_room_for_the_next_plan(local_plans: list[dict[str, Any]]) -> None:
    wake.plan_tick(1_300, 1_000)
    wake.tick_started(1_300)
    wake.plan_tick(1_400, 1_300)
    assert [s["kwargs"]["at"] for s in local_plans] == [1_300, 1_400]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@override_settings(RESONATE=LONG_TICK)
def test_a_stopped_runner_leaves_no_connection_open() -> None:
    """A host that stops the runner (its ASGI lifespan's shutdown) gets its database connection
    back at once, not whenever the thread's leftovers are collected."""

    def backends() -> set[int]:
        """The other sessions on this database (another test's closing connection may still be
        leaving, so the test follows the runner's own, the one that was not there before)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return {int(row[0]) for row in cursor.fetchall()}

    before = backends()
    runner = ticker.start()
    try:
        wait_for(lambda: now_ms() + 30_000 < runner._wake_at < ticker.NEVER, "the first pass")
        opened = backends() - before
        assert len(opened) == 1, opened  # the runner's connection
    finally:
        runner.stop()
    # Given back by stop() itself (the server's backend leaves a moment after the socket
    # closes, so the check polls briefly; a connection left to garbage collection stays open).
    wait_for(lambda: not (backends() & opened), "the runner's connection to close", seconds=5)
