"""Delivery bookkeeping on the outbox table: leases, fencing by revision, backoff, the metronome."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator

import pytest
from django.test import override_settings
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from outbox import delivery
from outbox.hub import STALE_SUBSCRIBER_MS, Hub, Stream
from outbox.models import PUSH_Q, Message, Subscriber
from resonate_project.core.clock import now_ms
from resonate_project.engine import outbox as enqueue
from resonate_project.runtime.beat import install_metronome

ALL = PUSH_Q | ~PUSH_Q


@pytest.fixture
def message(db):
    enqueue.unblock({"id": "p", "state": "resolved"}, "http://receiver/hook", 1_000)
    return Message.objects.get()


def test_a_claimed_message_is_not_claimed_again_while_its_lease_runs(message):
    first = delivery.claim(ALL, 1_000, 10)
    assert [c.key for c in first] == [message.key]
    assert delivery.claim(ALL, 1_000 + 29_999, 10) == []


def test_a_lapsed_lease_fences_out_the_first_drainer(message):
    first = delivery.claim(ALL, 1_000, 10)
    second = delivery.claim(ALL, 1_000 + 30_000, 10)  # the first drainer looks dead
    assert [c.key for c in second] == [message.key]
    delivery.fail(first[0], 40_000, "late failure from the first drainer")
    assert delivery.ack(first) == 0  # its late ack deletes nothing either
    row = Message.objects.get()
    assert row.last_error == ""
    assert row.next_attempt_at == 1_000 + 30_000 + 30_000  # the second lease is intact
    assert delivery.ack(second) == 1
    assert not Message.objects.exists()


def test_a_message_replaced_in_flight_survives_the_ack_of_the_old_one(message):
    claimed = delivery.claim(ALL, 1_000, 10)
    enqueue.unblock({"id": "p", "state": "rejected"}, "http://receiver/hook", 1_500)
    assert delivery.ack(claimed) == 0
    row = Message.objects.get()
    assert row.promise == {"id": "p", "state": "rejected"}
    assert row.next_attempt_at == 1_500  # due again at once


def test_failures_back_off_exponentially_up_to_the_bound(message):
    waits = []
    now = 1_000
    for _ in range(10):
        (item,) = delivery.claim(ALL, now, 10)
        delivery.fail(item, now, "HTTP 500")
        row = Message.objects.get()
        waits.append(row.next_attempt_at - now)
        now = row.next_attempt_at
    assert waits[:5] == [500, 1_000, 2_000, 4_000, 8_000]
    assert waits[-1] == 60_000
    assert Message.objects.get().attempts == 10  # never dropped


def test_a_released_message_is_due_at_once_and_not_counted_as_an_attempt(message):
    claimed = delivery.claim(ALL, 1_000, 10)
    delivery.release(claimed, 2_000)
    row = Message.objects.get()
    assert (row.next_attempt_at, row.attempts) == (2_000, 0)


@pytest.mark.parametrize(("tick_ms", "expire"), [(200, 1), (1_000, 1), (2_500, 3)])
def test_the_metronome_keeps_sub_second_intervals_and_drops_late_ticks(db, tick_ms, expire):
    with override_settings(RESONATE={"TICK_INTERVAL_MS": tick_ms}):
        install_metronome()
        install_metronome()  # idempotent: beat restarts install it again
    tick = PeriodicTask.objects.get(name="resonate-tick")
    assert tick.task == "resonate.tick"
    assert (tick.interval.every, tick.interval.period) == (
        tick_ms * 1_000,
        IntervalSchedule.MICROSECONDS,
    )
    assert tick.interval.schedule.run_every.total_seconds() == tick_ms / 1_000
    assert tick.expire_seconds == expire
    assert PeriodicTask.objects.filter(name__startswith="resonate-").count() == 2


def test_acking_thousands_of_messages_at_once_deletes_exactly_those(db):
    for i in range(1_500):
        enqueue.unblock({"id": f"p{i}", "state": "resolved"}, "poll://uni@g/w", 1_000)
    claimed = delivery.claim(ALL, 1_000, 2_000)
    assert len(claimed) == 1_500
    enqueue.unblock({"id": "p7", "state": "rejected"}, "poll://uni@g/w", 1_100)  # replaced
    assert delivery.ack(claimed) == 1_499
    assert list(Message.objects.values_list("key", flat=True)) == ["p7:notify:poll://uni@g/w"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_hub_that_loses_the_database_mid_bookkeeping_keeps_it_for_the_next_pass():
    """Finding of the chaos run (issue 13): a stream hanging up, or frames confirmed, while the
    database restarts. The hub used to drop that bookkeeping with the failed statement: the hung-up
    stream's registry row then stayed, refreshed by its process forever (so other web processes
    kept routing ``poll://any@g/id`` to a stream that was gone), and the confirmed frames stayed
    leased until their lease lapsed, to be delivered again."""
    import psycopg
    from django.db import Error as DjangoDbError
    from django.db import close_old_connections, connection

    hub = Hub(autostart=False)
    with web_loop() as loop:
        stream = asyncio.run_coroutine_threadsafe(connect(hub, "g", "x"), loop).result(10)
        assert stream is not None
        enqueue.unblock({"id": "p", "state": "resolved"}, "poll://uni@g/x", now_ms())
        hub.run_once()  # registers the stream, claims the frame and hands it to the stream
        assert Subscriber.objects.filter(group="g", stream_id="x").exists()
        claimed = asyncio.run_coroutine_threadsafe(stream.queue.get(), loop).result(10)
        assert claimed is not None
    hub.ack([claimed])  # the stream confirmed the frame...
    hub.disconnect(stream)  # ...and then hung up

    # The database goes away under the hub (its connection is terminated), as in a restart.
    connection.ensure_connection()
    backend = connection.connection.info.backend_pid
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or None,
        port=settings["PORT"] or None,
        user=settings["USER"] or None,
        password=settings["PASSWORD"] or None,
        dbname=settings["NAME"],
        autocommit=True,
    ) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
    with pytest.raises(DjangoDbError):
        hub.run_once()
    close_old_connections()  # what the hub thread does before its next pass

    hub.run_once()
    assert not Subscriber.objects.filter(group="g", stream_id="x").exists()
    assert not Message.objects.exists()  # the confirmed frame's row is gone, not redelivered


@contextlib.contextmanager
def web_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """A web process's event loop, where streams live, running in a thread of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


async def connect(hub: Hub, group: str, stream_id: str) -> Stream | None:
    return hub.connect(group, stream_id)


def test_a_hub_deletes_the_stream_registrations_a_killed_web_process_left(db):
    """Finding of the chaos run (issue 13): every SIGKILLed web process left a registry row per
    open stream behind, forever."""
    now = 10_000_000
    dead = now - STALE_SUBSCRIBER_MS - 1
    Subscriber.objects.create(group="g", stream_id="dead", process="gone:1:x", seen_at=dead)
    Subscriber.objects.create(group="g", stream_id="alive", process="other:2:y", seen_at=now - 900)
    Hub(clock=lambda: now, autostart=False).run_once()
    assert list(Subscriber.objects.values_list("stream_id", flat=True)) == ["alive"]


def test_a_hub_whose_registrations_were_deleted_registers_its_streams_again(db):
    """A hub kept from refreshing its rows for longer than that (a long database outage) finds
    them deleted by another hub, and registers its streams again."""
    clock = [10_000_000]
    hub = Hub(clock=lambda: clock[0], autostart=False)
    with web_loop() as loop:
        asyncio.run_coroutine_threadsafe(connect(hub, "g", "x"), loop).result(10)
        hub.run_once()
        Subscriber.objects.all().delete()  # swept by another web process
        clock[0] += 1_000
        hub.run_once()
    assert list(Subscriber.objects.values_list("group", "stream_id")) == [("g", "x")]


@pytest.mark.parametrize("routes", [False, True], ids=["where", "routes"])
def test_a_claim_hands_out_the_oldest_due_first_and_leaves_later_ones(db, routes):
    """Both claims (by a filter, and the SSE hub's by routes) take what is due, oldest first,
    at most the limit, and lease it: its revision and attempts are what an ack must match."""
    for i, at in enumerate([3_000, 1_000, 2_000, 9_000]):
        enqueue.unblock({"id": f"p{i}", "state": "resolved"}, "poll://any@g", 0)
        Message.objects.filter(key__startswith=f"p{i}:").update(next_attempt_at=at)

    def take(now: int, limit: int) -> list[delivery.Claimed]:
        if routes:
            return delivery.claim_routes(["g"], now, limit, 500)
        return delivery.claim(ALL, now, limit, lease=500)

    first = take(5_000, 2)
    assert [item.key.split(":")[0] for item in first] == ["p1", "p2"]
    assert {(item.revision, item.attempts) for item in first} == {(2, 1)}
    assert [item.key.split(":")[0] for item in take(5_000, 10)] == ["p0"]  # p3 is not due
    assert set(Message.objects.filter(next_attempt_at=5_500).values_list("key", flat=True)) == {
        item.key for item in first
    } | {Message.objects.get(key__startswith="p0:").key}
    assert delivery.ack(first) == 2
    assert sorted(Message.objects.values_list("key", flat=True)) == [
        Message.objects.get(key__startswith=p).key for p in ("p0", "p3")
    ]
