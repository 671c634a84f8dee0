"""The SSE side of the trust boundary, unit level (``outbox.hub``, ``outbox.views``): claims that
scale with the groups a process holds, the stream cap, one stream per ``(group, id)``, frames that
stay leased until their stream outlived ``SSE_ACK_GRACE_MS``, and the access check.

A hub is driven by hand: no hub thread (``autostart=False``), a clock the test moves, and an event
loop that runs only between database calls (``run_once`` is synchronous, as on its thread).
tests/system/test_sse_security.py covers the same against a real server.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest
from django.http import HttpResponse
from django.test import AsyncRequestFactory, override_settings

from outbox import delivery, views
from outbox.hub import Hub, Stream
from outbox.models import PUSH_Q, Message
from resonate_project.engine import outbox as enqueue

GRACE = 15_000
IN_FLIGHT = 30_000
# Keepalives never fall due by themselves: every write in these tests is one the test caused.
SETTINGS = {
    "SSE_KEEPALIVE_MS": 3_600_000,
    "SSE_ACK_GRACE_MS": GRACE,
    "IN_FLIGHT_MS": IN_FLIGHT,
    "SSE_MAX_STREAMS": 20_000,
}
CONNECTED = b": connected\n\n"
KEEPALIVE = b": keepalive\n\n"


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    try:
        yield loop
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def hub(db: Any, clock: Clock) -> Iterator[Hub]:
    with override_settings(RESONATE=SETTINGS):
        yield Hub(clock, autostart=False)


def connect(loop: asyncio.AbstractEventLoop, hub: Hub, group: str, stream_id: str) -> Stream:
    async def go() -> Stream | None:
        return hub.connect(group, stream_id)

    stream = loop.run_until_complete(go())
    assert stream is not None
    return stream


def step(loop: asyncio.AbstractEventLoop, body: AsyncGenerator[bytes]) -> bytes | None:
    """The next chunk the server would write, or None when the response ended. Bounded: a chunk
    the test expects is always ready at once (keepalives fall due on the test's clock only)."""
    try:
        return loop.run_until_complete(asyncio.wait_for(anext(body), 30))
    except StopAsyncIteration:
        return None


def settle(loop: asyncio.AbstractEventLoop) -> None:
    """Run what the hub thread handed to the loop (``call_soon_threadsafe``)."""
    loop.run_until_complete(asyncio.sleep(0))


def data(chunk: bytes | None) -> dict[str, Any]:
    assert chunk is not None
    assert chunk.startswith(b"data: ")
    assert chunk.endswith(b"\n\n")
    decoded: dict[str, Any] = json.loads(chunk[len(b"data: ") :])
    return decoded


def task_of(chunk: bytes | None) -> str:
    task_id: str = data(chunk)["data"]["task"]["id"]
    return task_id


def execute(task_id: str, address: str, now: int) -> None:
    enqueue.execute(task_id, 0, address, now)


# --- claims by route ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "route"),
    [
        ("poll://uni@g/w1", "g/w1"),
        ("poll://any@g", "g"),
        ("poll://any@g/w1", "g"),
        ("http://receiver.example/hook", None),
    ],
)
def test_the_poll_route_is_written_with_the_row(db: Any, address: str, route: str | None) -> None:
    execute("t", "poll://any@before", 1_000)
    execute("t", address, 2_000)  # the upsert re-targets the row: the route follows
    assert Message.objects.get(key="t").poll_route == route


def test_a_hub_holding_ten_thousand_groups_claims_their_messages(
    hub: Hub, loop: asyncio.AbstractEventLoop, clock: Clock
) -> None:
    # Regression: the claim was one `address LIKE 'poll://any@g/%'` per group, OR-ed; from about
    # a thousand groups SQLite refused it ("Expression tree is too large") and no stream of the
    # process got anything.
    streams = [connect(loop, hub, f"g{i}", "w") for i in range(10_000)]
    execute("uni", "poll://uni@g9999/w", clock.now)
    execute("any", "poll://any@g5000", clock.now)
    execute("named", "poll://any@g1234/w", clock.now)
    execute("absent", "poll://any@nobody-here", clock.now)
    execute("other", "poll://uni@g1/someone-else", clock.now)
    hub.run_once()
    settle(loop)

    for index, task_id in ((9999, "uni"), (5000, "any"), (1234, "named")):
        body = streams[index].body()
        assert step(loop, body) == CONNECTED
        assert task_of(step(loop, body)) == task_id
    receivers = {9999, 5000, 1234}
    assert [i for i, s in enumerate(streams) if not s.queue.empty() and i not in receivers] == []
    # Messages for streams this process does not hold were never claimed.
    untouched = Message.objects.filter(key__in=["absent", "other"])
    assert sorted(untouched.values_list("key", "attempts", "next_attempt_at")) == [
        ("absent", 0, clock.now),
        ("other", 0, clock.now),
    ]


# --- the stream cap and the access check --------------------------------------------------------


def get(loop: asyncio.AbstractEventLoop, group: str, stream_id: str) -> Any:
    request = AsyncRequestFactory().get(f"/poll/{group}/{stream_id}")
    return loop.run_until_complete(views.poll(request, group, stream_id))


@pytest.fixture
def view_hub(hub: Hub, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setattr(views, "get_hub", lambda: hub)
    return hub


def test_streams_beyond_the_cap_are_refused_with_503(
    view_hub: Hub, loop: asyncio.AbstractEventLoop
) -> None:
    with override_settings(RESONATE={**SETTINGS, "SSE_MAX_STREAMS": 2}):
        held = [get(loop, "g", "a"), get(loop, "h", "b")]  # open: their bodies are referenced
        assert [r.status_code for r in held] == [200, 200]
        refused = get(loop, "g", "c")
        assert refused.status_code == 503
        assert "SSE_MAX_STREAMS" in json.loads(refused.content)["error"]
        assert refused["Retry-After"] == "1"
        # A stream replacing one of the same (group, id) takes no new slot.
        held.append(get(loop, "g", "a"))
        assert held[-1].status_code == 200
        assert view_hub.count() == 2


def test_the_poll_view_asks_the_gate_before_connecting(
    view_hub: Hub, loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = []

    async def deny(request: Any, group: str) -> HttpResponse:
        asked.append((request.path, group))
        return HttpResponse(status=403)

    monkeypatch.setattr(views, "acheck_poll", deny)
    assert get(loop, "g", "w1").status_code == 403
    assert asked == [("/poll/g/w1", "g")]
    assert view_hub.count() == 0


def test_a_response_dropped_before_it_started_frees_its_stream(
    view_hub: Hub, loop: asyncio.AbstractEventLoop
) -> None:
    response = get(loop, "g", "w1")
    assert view_hub.count() == 1
    del response  # the client left while middleware was still running: the body never ran
    gc.collect()
    settle(loop)
    assert view_hub.count() == 0


# --- one stream per (group, id) ------------------------------------------------------------------


def test_a_second_stream_on_the_same_id_replaces_the_first(
    hub: Hub, loop: asyncio.AbstractEventLoop, clock: Clock
) -> None:
    # Regression: both streams stayed connected and each message went to one of them at random.
    first = connect(loop, hub, "g", "w1").body()
    assert step(loop, first) == CONNECTED
    execute("written", "poll://uni@g/w1", clock.now)
    hub.run_once()
    assert task_of(step(loop, first)) == "written"  # written, not yet confirmed
    execute("queued", "poll://uni@g/w1", clock.now)
    hub.run_once()
    settle(loop)  # routed to the first stream, not written yet

    second = connect(loop, hub, "g", "w1").body()
    assert step(loop, first) is None  # the first response ends
    assert step(loop, second) == CONNECTED
    later = [f"later-{i}" for i in range(20)]
    for task_id in later:
        execute(task_id, "poll://uni@g/w1", clock.now)
    hub.run_once()
    got = [task_of(step(loop, second)) for _ in range(22)]
    assert sorted(got) == sorted(["written", "queued", *later])

    # The second stream outlives the window and writes again: everything is confirmed.
    clock.now += GRACE
    assert step(loop, second) == KEEPALIVE
    execute("last", "poll://uni@g/w1", clock.now)
    hub.run_once()
    assert task_of(step(loop, second)) == "last"
    hub.run_once()
    assert list(Message.objects.values_list("key", flat=True)) == ["last"]


# --- frames stay leased until their stream outlived the grace window ---------------------------


def test_a_frame_is_deleted_only_after_its_stream_outlived_the_window(
    hub: Hub, loop: asyncio.AbstractEventLoop, clock: Clock
) -> None:
    body = connect(loop, hub, "g", "w1").body()
    assert step(loop, body) == CONNECTED
    written_at = clock.now
    execute("m", "poll://uni@g/w1", written_at)
    hub.run_once()
    assert task_of(step(loop, body)) == "m"
    row = Message.objects.get(key="m")
    # Leased for longer than the window: no other drainer takes it meanwhile.
    assert row.next_attempt_at == written_at + IN_FLIGHT + GRACE

    clock.now = written_at + GRACE - 1
    assert step(loop, body) == KEEPALIVE  # a write inside the window confirms nothing
    clock.now = written_at + GRACE
    assert step(loop, body) == KEEPALIVE  # the window has run: this write will confirm it...
    hub.run_once()
    assert Message.objects.filter(key="m").exists()  # ...once it returned
    execute("next", "poll://uni@g/w1", clock.now)
    hub.run_once()
    assert task_of(step(loop, body)) == "next"
    hub.run_once()
    assert list(Message.objects.values_list("key", flat=True)) == ["next"]


@pytest.mark.parametrize("ended_after_ms", [0, GRACE - 1])
def test_a_stream_that_ends_within_the_window_gives_its_frames_back(
    hub: Hub, loop: asyncio.AbstractEventLoop, clock: Clock, ended_after_ms: int
) -> None:
    # Regression: a frame was acknowledged (its row deleted) as soon as it was handed to the
    # server, so a worker that died with it unread in its socket never got it.
    body = connect(loop, hub, "g", "w1").body()
    assert step(loop, body) == CONNECTED
    execute("m", "poll://uni@g/w1", clock.now)
    hub.run_once()
    assert task_of(step(loop, body)) == "m"
    clock.now += ended_after_ms
    loop.run_until_complete(body.aclose())  # the client went away; the server closes the body
    hub.run_once()
    row = Message.objects.get(key="m")
    assert (row.next_attempt_at, row.attempts) == (clock.now, 0)  # due again, not a failure

    again = connect(loop, hub, "g", "w1").body()
    assert step(loop, again) == CONNECTED
    hub.run_once()
    assert task_of(step(loop, again)) == "m"


def test_a_released_frame_fences_out_the_late_confirmation(
    hub: Hub, loop: asyncio.AbstractEventLoop, clock: Clock
) -> None:
    execute("m", "poll://uni@g/w1", clock.now)
    (claimed,) = delivery.claim(PUSH_Q | ~PUSH_Q, clock.now, 10)
    delivery.release([claimed], clock.now)  # e.g. its stream ended
    assert delivery.ack([claimed]) == 0  # a confirmation that arrives later deletes nothing
    assert Message.objects.filter(key="m").exists()


def test_a_stream_address_over_the_id_limit_is_a_400(db: Any, client: Any) -> None:
    """The group and id become Subscriber rows under a unique index: they are capped like ids."""
    res = client.get(f"/poll/{'g' * 1025}/w1")
    assert res.status_code == 400
    assert "group" in res.json()["error"]
    res = client.get(f"/poll/g/{'é' * 600}")
    assert res.status_code == 400
    assert "id" in res.json()["error"]


# --- streams end after SSE_MAX_AGE_MS ------------------------------------------------------------


def test_a_stream_ends_at_its_maximum_age_once_what_it_wrote_is_confirmed(
    hub: Hub, loop: asyncio.AbstractEventLoop, clock: Clock
) -> None:
    """Found by the chaos run (issue 13): resonate-sdk 0.8.1 reads its stream under aiohttp's
    default total timeout (300 s) and its reconnect loop does not survive that ``TimeoutError``:
    a worker whose stream had stayed up five minutes never heard another message. Streams now
    end after ``SSE_MAX_AGE_MS`` and the SDK reconnects, without a frame lost or sent twice."""
    max_age = GRACE - 5_000  # shorter than the grace window, so a frame is unconfirmed at the end
    with override_settings(RESONATE={**SETTINGS, "SSE_MAX_AGE_MS": max_age}):
        opened = clock.now
        body = connect(loop, hub, "g", "w1").body()
        assert step(loop, body) == CONNECTED
        execute("m", "poll://uni@g/w1", clock.now)
        hub.run_once()
        assert task_of(step(loop, body)) == "m"

        clock.now = opened + max_age  # too old: nothing new is written to it any more
        execute("queued", "poll://uni@g/w1", clock.now)
        hub.run_once()
        settle(loop)
        clock.now = opened + GRACE  # m's window has run
        assert step(loop, body) == KEEPALIVE  # not "queued": this write confirms m...
        assert step(loop, body) is None  # ...and the response ends
        hub.run_once()
        row = Message.objects.get()  # m was delivered; "queued" is due again at once
        assert (row.key, row.next_attempt_at, row.attempts) == ("queued", clock.now, 0)

        again = connect(loop, hub, "g", "w1").body()  # the worker reconnects
        assert step(loop, again) == CONNECTED
        hub.run_once()
        assert task_of(step(loop, again)) == "queued"


def test_a_stream_without_unconfirmed_frames_ends_at_its_maximum_age(
    hub: Hub, loop: asyncio.AbstractEventLoop, clock: Clock
) -> None:
    with override_settings(RESONATE={**SETTINGS, "SSE_MAX_AGE_MS": 60_000}):
        body = connect(loop, hub, "g", "w1").body()
        assert step(loop, body) == CONNECTED
        clock.now += 59_999
        assert step(loop, body) == KEEPALIVE  # it woke up for its age: not yet
        clock.now += 1
        assert step(loop, body) is None
