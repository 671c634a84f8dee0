"""Issue 23: poison input never stops a shared loop, and a stream lasts only as long as its
credential and its share.

- One stream or row the database refuses, or a row that no longer decodes, is set aside (a stream
  closed with the reason, a message dead-lettered, a step's row quarantined) and the loop goes on
  with the others in the same pass: the SSE hub, the HTTP push drain, the step runner.
- A stream opened with a service credential closes within ``CREDENTIAL_CHECK_MS`` of its
  revocation, a JWT's stream when the token expires.
- One credential holds at most ``SSE_MAX_STREAMS_PER_CREDENTIAL`` of a process's streams.

Hubs are driven by hand as in tests/security/test_sse.py: no hub thread, a clock the test moves.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import RequestFactory, override_settings

from outbox import views
from outbox.hub import CREDENTIAL_CHECK_MS, Hub, Stream
from outbox.models import Message, Quarantine
from outbox.push import drain_push
from promises.models import Promise
from resonate_project.access.credentials import credential_create, credential_revoke
from resonate_project.access.gate import PollGrant, poll_access
from resonate_project.engine import outbox as enqueue
from resonate_project.engine.steps import run_due
from schedules.models import Schedule
from tests.security.test_auth import RSA_KEY, pem, token
from tests.security.test_push import BASE, Receiver
from tests.support.factories import FAR, Api

SETTINGS = {
    "SSE_KEEPALIVE_MS": 3_600_000,
    "SSE_ACK_GRACE_MS": 15_000,
    "IN_FLIGHT_MS": 30_000,
    "SSE_MAX_STREAMS": 1000,
}
CONNECTED = b": connected\n\n"
# 5,000 digits: valid JSON to both databases, but Python refuses to read an integer that long
# (ValueError: "Exceeds the limit (4300 digits) for integer string conversion"). Stands for any
# stored value that no longer decodes.
UNREADABLE = '{"id": "p", "state": "resolved", "n": 1' + "0" * 5000 + "}"


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
    try:
        return loop.run_until_complete(asyncio.wait_for(anext(body), 30))
    except StopAsyncIteration:
        return None


def settle(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(asyncio.sleep(0))


def frame(chunk: bytes | None) -> dict[str, Any]:
    assert chunk is not None
    assert chunk.startswith(b"data: "), chunk
    decoded: dict[str, Any] = json.loads(chunk[len(b"data: ") :])
    return decoded


def corrupt(key: str) -> None:
    """Overwrite a message's stored promise with a value that no longer decodes (raw SQL: the
    row as a bad disk, a manual fix or an older release may leave it)."""
    value = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE outbox_message SET promise = {value} WHERE key = %s", [UNREADABLE, key]
        )


def unblock(promise_id: str, address: str, now: int) -> str:
    enqueue.unblock({"id": promise_id, "state": "resolved"}, address, now)
    return f"{promise_id}:notify:{address}"


def dead_letters(client: Any) -> dict[str, str]:
    """``GET /api/outbox?state=dead``: key -> last error, as an operator sees them."""
    res = client.get("/api/outbox?state=dead")
    assert res.status_code == 200, res.content
    body = res.json()
    records = body["results"] if isinstance(body, dict) else body
    return {r["key"]: r["lastError"] for r in records}


# --- the SSE hub ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "poison",
    [
        pytest.param("w\x00", marks=pytest.mark.postgres, id="nul"),  # PostgreSQL refuses NUL
        pytest.param("w\udcff", id="lone-surrogate"),  # no driver can encode it
    ],
)
def test_a_stream_the_database_refuses_is_closed_and_the_others_still_receive(
    hub: Hub, loop: asyncio.AbstractEventLoop, clock: Clock, poison: str
) -> None:
    # Regression: the poisoned stream's Subscriber write failed, the pass was put back whole and
    # retried twice a second, and no stream of the process received anything until a restart.
    healthy = connect(loop, hub, "billing", "w1").body()
    poisoned = connect(loop, hub, "billing", poison).body()
    assert step(loop, healthy) == CONNECTED
    assert step(loop, poisoned) == CONNECTED
    enqueue.execute("t1", 0, "poll://uni@billing/w1", clock.now)

    hub.run_once()
    settle(loop)

    assert frame(step(loop, healthy))["data"]["task"]["id"] == "t1"
    closing = step(loop, poisoned)
    assert closing is not None
    assert closing.startswith(b": closed: ")
    assert step(loop, poisoned) is None
    assert hub.count() == 1
    # The hub goes on: later messages and later passes reach the healthy stream.
    enqueue.execute("t2", 0, "poll://any@billing", clock.now)
    hub.run_once()
    assert frame(step(loop, healthy))["data"]["task"]["id"] == "t2"


def test_an_unreadable_message_is_dead_lettered_and_the_stream_gets_the_others(
    hub: Hub, loop: asyncio.AbstractEventLoop, clock: Clock, client: Any
) -> None:
    # Regression: the claim decoded its rows all at once; one that did not decode failed the
    # claim, every pass, so none of the messages claimed with it was ever delivered.
    body = connect(loop, hub, "billing", "w1").body()
    assert step(loop, body) == CONNECTED
    bad = unblock("bad", "poll://uni@billing/w1", clock.now)
    corrupt(bad)
    good = unblock("good", "poll://uni@billing/w1", clock.now)

    hub.run_once()

    assert frame(step(loop, body))["data"]["promise"]["id"] == "good"
    row = Message.objects.get(key=bad)  # still readable, as the admin reads it
    assert row.dead_at == clock.now  # set aside for an operator, not dropped
    assert "unreadable row" in dead_letters(client)[bad]
    assert Message.objects.get(key=good).dead_at is None
    hub.run_once()  # the next pass does not meet the bad row again
    assert Message.objects.get(key=bad).attempts == row.attempts


# --- HTTP push ------------------------------------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def test_push_dead_letters_an_unreadable_row_and_delivers_the_others(
    db: Any, receiver: Receiver, client: Any
) -> None:
    # Regression: the drain raised on the row and stopped; the rows claimed with it waited for
    # their lease to lapse, and met the same row again.
    now = int(time.time() * 1000)
    bad = unblock("bad", receiver.url("/bad"), now - 2)
    corrupt(bad)
    good = unblock("good", receiver.url("/good"), now - 1)
    with override_settings(RESONATE=BASE):
        drain_push(100)
    assert [g.path for g in receiver.got] == ["/good"]
    assert not Message.objects.filter(key=good).exists()  # delivered
    assert Message.objects.get(key=bad).dead_at is not None
    assert "unreadable row" in dead_letters(client)[bad]


def test_push_records_a_reply_quoting_a_nul_byte_and_settles_the_others(db: Any) -> None:
    # Regression (PostgreSQL): the error text quoted the reply's NUL byte, its write failed, and
    # the drain stopped before settling the other requests (delivered ones were sent again).
    def nul(handler: Any, receiver: Receiver) -> None:
        handler.send_response(500)
        handler.send_header("Content-Length", "9")
        handler.end_headers()
        handler.wfile.write(b"bad\x00reply")

    failing, healthy = Receiver(nul), Receiver()
    try:
        now = int(time.time() * 1000)
        bad = unblock("bad", failing.url(), now - 2)
        good = unblock("good", healthy.url(), now - 1)
        with override_settings(RESONATE=BASE):
            drain_push(100)
        assert len(healthy.got) == 1
        assert not Message.objects.filter(key=good).exists()
        row = Message.objects.get(key=bad)
        assert row.last_error == "HTTP 500: bad\\x00reply"  # retried later, its error readable
        assert row.dead_at is None
    finally:
        failing.close()
        healthy.close()


# --- the step runner -----------------------------------------------------------------------------


def create_schedule(api: Api, schedule_id: str, now: int) -> None:
    res = api(
        "schedule.create",
        now=now,
        id=schedule_id,
        cron="* * * * *",
        promiseId=f"{schedule_id}.{{{{.timestamp}}}}",
        promiseTimeout=FAR,
    )
    assert res.status == 200, res


def test_a_schedule_that_fails_is_set_aside_and_the_other_rows_and_steps_run(api: Api) -> None:
    # Regression: the schedule step raised on one row, its whole batch rolled back, and the
    # steps after it (timeouts, lease expiry, retries, drains) never ran again either.
    create_schedule(api, "bad", 0)
    create_schedule(api, "good", 0)
    with connection.cursor() as cursor:  # a corrupt row: a cron no release can read
        cursor.execute("UPDATE schedules_schedule SET cron = 'not a cron' WHERE id = 'bad'")
    res = api(
        "promise.create",
        now=0,
        id="timer",
        timeoutAt=1_000,
        param={},
        tags={"resonate:external": "true"},
    )
    assert res.status == 200, res

    run_due(60_000, 100)

    fired = set(Promise.objects.filter(id__startswith="good.").values_list("id", flat=True))
    assert fired == {"good.60000"}
    assert Promise.objects.get(id="timer").state != "pending"  # a later step ran too
    (entry,) = Quarantine.objects.all()
    assert (entry.step, entry.row, entry.due_at) == ("schedule_fire", "bad", 60_000)
    assert "not a cron" in entry.error or "Cron" in entry.error
    assert not Promise.objects.filter(id__startswith="bad.").exists()

    # The set-aside row is skipped from then on, and the others go on.
    run_due(120_000, 100)
    assert Promise.objects.filter(id__startswith="good.").count() == 2
    assert Quarantine.objects.count() == 1
    assert Schedule.objects.get(id="bad").next_run_at == 60_000


def test_an_unreadable_promise_is_set_aside_and_the_other_timeouts_fire(api: Api) -> None:
    for promise_id in ("bad", "good"):
        res = api(
            "promise.create",
            now=0,
            id=promise_id,
            timeoutAt=1_000,
            param={},
            tags={"resonate:external": "true"},
        )
        assert res.status == 200, res
    value = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE promises_promise SET tags = {value} WHERE id = 'bad'", [UNREADABLE])

    run_due(2_000, 100)

    assert Promise.objects.filter(id="good").values_list("state", flat=True).get() != "pending"
    (entry,) = Quarantine.objects.all()
    assert (entry.step, entry.row, entry.due_at) == ("promise_timeouts", "bad", 1_000)
    run_due(3_000, 100)  # not met again
    assert Quarantine.objects.get().at == entry.at


# --- streams end with their credential -----------------------------------------------------------


def grant(group: str, bearer: str) -> PollGrant:
    """What the gate grants this bearer for ``/poll/{group}/…`` (auth required)."""
    request = RequestFactory().get(f"/poll/{group}/w", HTTP_AUTHORIZATION=f"Bearer {bearer}")
    granted = poll_access(request, group)
    assert isinstance(granted, PollGrant), granted
    return granted


def open_stream(
    loop: asyncio.AbstractEventLoop,
    hub: Hub,
    monkeypatch: pytest.MonkeyPatch,
    group: str,
    stream_id: str,
    granted: PollGrant,
) -> Any:
    """``GET /poll/{group}/{stream_id}`` through the view, as the gate granted it."""

    async def gate(request: Any, group: str) -> PollGrant:
        return granted

    monkeypatch.setattr(views, "get_hub", lambda: hub)
    monkeypatch.setattr(views, "acheck_poll", gate)
    request = RequestFactory().get(f"/poll/{group}/{stream_id}")
    return loop.run_until_complete(views.poll(request, group, stream_id))


AUTH = {**SETTINGS, "AUTH": "required", "JWT_PUBLIC_KEY": pem(RSA_KEY.public_key())}


def test_a_revoked_credentials_stream_closes_within_seconds(
    db: Any, loop: asyncio.AbstractEventLoop, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: the stream went on receiving until SSE_MAX_AGE_MS (4 minutes) after the revoke.
    with override_settings(RESONATE=AUTH):
        hub = Hub(clock, autostart=False)
        _, revoked_token = credential_create(name="billing", now=0, groups=["billing"])
        _, kept_token = credential_create(name="shipping", now=0, groups=["shipping"])
        revoked = open_stream(
            loop, hub, monkeypatch, "billing", "w1", grant("billing", revoked_token)
        )
        kept = open_stream(loop, hub, monkeypatch, "shipping", "w1", grant("shipping", kept_token))
        revoked_body, kept_body = revoked.streaming_content, kept.streaming_content
        assert step(loop, revoked_body) == CONNECTED
        assert step(loop, kept_body) == CONNECTED
        hub.run_once()

        credential_revoke(name="billing", now=clock.now)  # by any process: it is a row
        enqueue.execute("after", 0, "poll://uni@billing/w1", clock.now)
        clock.now += CREDENTIAL_CHECK_MS
        hub.run_once()
        settle(loop)

        assert step(loop, revoked_body) == b": closed: credential revoked\n\n"
        assert step(loop, revoked_body) is None
        row = Message.objects.get(key="after")  # not written to the revoked stream: waiting
        assert row.attempts == 0
        assert row.dead_at is None
        enqueue.execute("kept", 0, "poll://uni@shipping/w1", clock.now)
        hub.run_once()
        assert frame(step(loop, kept_body))["data"]["task"]["id"] == "kept"


def test_a_jwt_stream_closes_when_the_token_expires(
    db: Any, loop: asyncio.AbstractEventLoop, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    with override_settings(RESONATE=AUTH):
        hub = Hub(clock, autostart=False)
        exp = int(time.time()) + 600
        granted = grant("billing", token({"sub": "billing", "exp": exp, "groups": ["billing"]}))
        assert granted.expires_at == exp * 1000
        body = open_stream(loop, hub, monkeypatch, "billing", "w1", granted).streaming_content
        assert step(loop, body) == CONNECTED
        clock.now = exp * 1000 - 1
        hub.run_once()
        assert hub.count() == 1
        clock.now = exp * 1000 + CREDENTIAL_CHECK_MS
        hub.run_once()
        settle(loop)
        assert step(loop, body) == b": closed: credential expired\n\n"
        assert step(loop, body) is None


# --- each credential's share of the streams ------------------------------------------------------


def test_one_credential_cannot_take_every_stream_slot(
    db: Any, loop: asyncio.AbstractEventLoop, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Regression: one credential could open SSE_MAX_STREAMS streams; every other tenant's worker
    # then got 503.
    limits = {**AUTH, "SSE_MAX_STREAMS": 4, "SSE_MAX_STREAMS_PER_CREDENTIAL": 2}
    with override_settings(RESONATE=limits):
        hub = Hub(clock, autostart=False)
        _, greedy_token = credential_create(name="greedy", now=0)
        _, other_token = credential_create(name="other", now=0)
        greedy, other = grant("g", greedy_token), grant("h", other_token)
        held = [open_stream(loop, hub, monkeypatch, "g", f"w{i}", greedy) for i in range(2)]
        assert [r.status_code for r in held] == [200, 200]

        refused = open_stream(loop, hub, monkeypatch, "g", "w2", greedy)
        assert refused.status_code == 429
        assert refused["Retry-After"]
        assert "SSE_MAX_STREAMS_PER_CREDENTIAL" in json.loads(refused.content)["error"]
        assert "2 streams" in json.loads(refused.content)["error"]
        # Replacing one of its own streams takes no new share; another credential still connects.
        held.append(open_stream(loop, hub, monkeypatch, "g", "w0", greedy))
        held.append(open_stream(loop, hub, monkeypatch, "h", "w0", other))
        assert [r.status_code for r in held[2:]] == [200, 200]
        assert hub.count() == 3


def test_the_default_share_is_half_the_process_streams(
    db: Any, loop: asyncio.AbstractEventLoop, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    with override_settings(RESONATE={**AUTH, "SSE_MAX_STREAMS": 4}):
        hub = Hub(clock, autostart=False)
        _, bearer = credential_create(name="one", now=0)
        granted = grant("g", bearer)
        got = [open_stream(loop, hub, monkeypatch, "g", f"w{i}", granted) for i in range(3)]
        assert [r.status_code for r in got] == [200, 200, 429]
