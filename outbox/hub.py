"""The SSE hub of one web process: its connected streams, and the thread that delivers their
``poll://`` messages.

A stream costs a coroutine (``Stream.frames``) and a queue; the hub thread is one per process.
It leases the rows addressed to the streams this process holds, by their ``poll_route`` column
(``poll_route``: one ``IN`` list per chunk of routes, so ten thousand connected groups
are a few index probes, not an expression per group), and hands each to a stream's queue on the
event loop. One stream per ``(group, id)``: a second connection with the same pair *replaces*
the first, which ends its response and hands everything it had not confirmed to the new one.
At most ``SSE_MAX_STREAMS`` streams per process; beyond that ``GET /poll/`` answers 503.

What "delivered" means (at least once, within what the server can observe):

- A frame written to stream S at time ``t`` stays leased to S ("sent to S"), not deleted. The
  lease taken at claim time is ``IN_FLIGHT_MS + SSE_ACK_GRACE_MS`` long, so no other drainer
  takes the row while S's window runs.
- The row is deleted once a later write to S that *started* at ``t + SSE_ACK_GRACE_MS`` or after
  returned (S writes a ``: keepalive`` comment as soon as the oldest unconfirmed frame's window
  has run, so the deletion follows the window promptly; with a window of 0 a frame is confirmed
  by its own write). Deleting is fenced by ``revision``: a row replaced meanwhile (a newer
  upsert) stays and is delivered in turn.
- If S ends first (the client went away, the server noticed, a replacement took over, the server
  shut down), every frame S wrote within its window and every message queued for S is released
  (due again at once, and for a replacement handed straight to the new stream) and delivered
  again: to the same ``(group, id)`` when it reconnects for ``poll://uni@`` messages, to the
  routing's choice for anycast.
- If the whole process dies, its leases lapse (at most ``IN_FLIGHT_MS + SSE_ACK_GRACE_MS`` after
  the claim) and any hub holding a matching stream claims the rows again.

So a message is lost only if its worker dies later than ``SSE_ACK_GRACE_MS`` after the frame was
written without having processed it (e.g. frozen that long, with the frame in its socket buffer),
or if the connection dies without the server noticing within that window (no FIN/RST reaches
it, e.g. a host that vanished: the server learns only when TCP gives up). Duplicates happen and
are tolerated by the SDKs: a worker that got a frame but died within the window, or one whose
stream was replaced, gets it again, and so may a frame written more than ``IN_FLIGHT_MS`` after
its claim (a stream slow to drain), whose lease can lapse first. A ``(group, id)`` connected to
two web processes at once is two streams (replacement is per process); each takes what its hub
claims.

One bad stream or row never stops the others (the hub thread is shared by every stream of the
process): a stream whose registration the database refuses is closed with the reason, a message
that cannot be read or routed is dead-lettered with its error (``delivery.dead_letter``), and the
pass goes on. Only the database itself being unavailable fails a pass, which is then retried
whole.

Streams opened with a credential are closed when it stops being valid: a revoked service
credential within ``CREDENTIAL_CHECK_MS`` (one query for every service credential the process's
streams use, so it holds whichever process revoked it), a JWT when it expires. Each credential
holds at most ``SSE_MAX_STREAMS_PER_CREDENTIAL`` of the process's streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import threading
import uuid
import weakref
from collections import Counter, deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field

from django.db import close_old_connections, transaction

from outbox import delivery
from outbox.delivery import UNAVAILABLE, Claimed
from outbox.models import Subscriber
from resonate_project.access.models import ServiceCredential
from resonate_project.core.addresses import parse_poll, stream_routes
from resonate_project.core.clock import now_ms
from resonate_project.core.conf import resonate_settings
from resonate_project.engine import task_transitions, wake
from resonate_project.engine.outbox import subscriber_fresh_after
from resonate_project.observability import metrics

log = logging.getLogger("resonate.hub")

PROCESS = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

# Routes per claim statement: one IN list over an indexed column. Ten thousand one-stream groups
# are 20,000 routes, i.e. 10 statements per look at the outbox.
ROUTE_CHUNK = 2000

KEEPALIVE = b": keepalive\n\n"
# How long a stream registration may go unrefreshed before any hub deletes it.
STALE_SUBSCRIBER_MS = 60_000

# How often the hub checks that the credentials of its open streams are still valid: a revoked
# one's streams end within this long (one indexed query per check for all of them).
CREDENTIAL_CHECK_MS = 2_000
# Credential hashes per query of that check.
CREDENTIAL_CHUNK = 500

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Opener:
    """Who opened a stream (``access.gate.check_poll``): ``owner`` names the credential (what the
    per-credential share counts by), ``credential`` is a service credential's token hash (checked
    for revocation), ``expires_at`` a JWT's expiry (ms)."""

    owner: str
    credential: str | None = None
    expires_at: int | None = None


@dataclass(frozen=True, slots=True)
class Full:
    """A stream refused for want of room: the limit (setting) reached, and its value."""

    setting: str
    limit: int


@dataclass(eq=False)
class Stream:
    """One ``GET /poll/{group}/{id}`` connection. Lives on its event loop; the hub thread reaches
    it only through ``loop.call_soon_threadsafe``."""

    hub: Hub
    group: str
    id: str
    loop: asyncio.AbstractEventLoop
    # Messages routed here and not yet written; None wakes ``frames`` to end.
    queue: asyncio.Queue[Claimed | None] = field(default_factory=asyncio.Queue)
    # Written and not yet confirmed, oldest first: (when the write started, the message).
    unconfirmed: deque[tuple[int, Claimed]] = field(default_factory=deque)
    closed: bool = False
    opener: Opener | None = None
    # Why the hub ended the stream (written to the client as a comment before the response ends).
    reason: str | None = None
    # When it was opened (ms), for the operator overview's "connected since".
    opened_at: int = field(default_factory=now_ms)

    def offer(self, item: Claimed) -> None:
        if self.closed:
            self.hub.release_later([item])
        else:
            self.queue.put_nowait(item)

    def close(self) -> list[Claimed]:
        """End the stream; returns what it holds unconfirmed (written within the window, or
        queued). Idempotent: a second call returns nothing."""
        if self.closed:
            return []
        self.closed = True
        held = [item for _, item in self.unconfirmed]
        self.unconfirmed.clear()
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is not None:
                held.append(item)
        self.queue.put_nowait(None)
        return held

    def body(self) -> AsyncGenerator[bytes]:
        """The response body (``frames``). A body dropped before it ran (the client left while
        the response was being prepared) never reaches its ``finally``: the stream is then
        disconnected when the body is garbage-collected."""
        frames = self.frames()
        weakref.finalize(frames, _disconnect_soon, self)
        return frames

    async def _next(self, timeout: float) -> Claimed | None:
        """The next queued message, or None after ``timeout`` seconds or when closed."""
        if not self.queue.empty():
            return self.queue.get_nowait()
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except TimeoutError:
            return None

    async def frames(self) -> AsyncGenerator[bytes]:
        """The response body: frames, keepalives, and the confirmations described above."""
        conf = resonate_settings()
        keepalive, grace = conf.SSE_KEEPALIVE_MS, conf.SSE_ACK_GRACE_MS
        clock = self.hub.clock
        try:
            last_write = clock()
            # Past its age the stream writes nothing new, only keepalives until what it wrote is
            # confirmed, then ends; what is queued for it goes back to the outbox.
            ends_at = last_write + conf.SSE_MAX_AGE_MS if conf.SSE_MAX_AGE_MS > 0 else None
            yield b": connected\n\n"
            while not self.closed:
                ending = ends_at is not None and clock() >= ends_at
                if ending and not self.unconfirmed:
                    break
                wake_at = last_write + keepalive
                if self.unconfirmed:
                    wake_at = min(wake_at, self.unconfirmed[0][0] + grace)
                if ends_at is not None and not ending:
                    wake_at = min(wake_at, ends_at)
                wait = max(wake_at - clock(), 0) / 1000
                if ending:
                    await asyncio.sleep(wait)
                    item = None
                else:
                    item = await self._next(wait)
                if self.closed:
                    break
                started = clock()
                if item is None:
                    yield KEEPALIVE
                else:
                    self.unconfirmed.append((started, item))
                    yield b"data: " + item.body + b"\n\n"
                last_write = started
                if self.closed:  # replaced while writing: the new stream has everything
                    break
                confirmed = []
                while self.unconfirmed and self.unconfirmed[0][0] + grace <= started:
                    confirmed.append(self.unconfirmed.popleft()[1])
                if confirmed:
                    self.hub.ack(confirmed)
            if self.reason is not None:
                yield f": closed: {self.reason}\n\n".encode()
        finally:
            self.hub.disconnect(self)


class Hub:
    def __init__(self, clock: Callable[[], int] = now_ms, autostart: bool = True) -> None:
        self.clock = clock
        self._autostart = autostart
        self._lock = threading.Lock()
        self._streams: dict[Key, Stream] = {}
        self._owned: Counter[str] = Counter()  # streams per Opener.owner
        self._acks: list[Claimed] = []
        self._releases: list[Claimed] = []
        self._gone: set[Key] = set()
        self._new: set[Key] = set()
        self._changes = 0  # bumped whenever _streams changes; the hub thread caches its routes
        self._routes: tuple[int, list[str], dict[str, list[Stream]]] = (-1, [], {})
        self._refreshed_at = 0
        self._checked_at = 0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # --- event-loop side (no database access here) ---------------------------------------------

    def connect(self, group: str, stream_id: str, opener: Opener | None = None) -> Stream | None:
        """:meth:`admit`, None when there is no room."""
        stream = self.admit(group, stream_id, opener)
        return None if isinstance(stream, Full) else stream

    def admit(self, group: str, stream_id: str, opener: Opener | None = None) -> Stream | Full:
        """A new stream for ``(group, stream_id)``, replacing one already here; ``Full`` when the
        process holds ``SSE_MAX_STREAMS`` streams, or the opener's credential its share of them."""
        key = (group, stream_id)
        stream = Stream(self, group, stream_id, asyncio.get_running_loop(), opener=opener)
        conf = resonate_settings()
        share = per_credential_limit(conf.SSE_MAX_STREAMS_PER_CREDENTIAL, conf.SSE_MAX_STREAMS)
        with self._lock:
            old = self._streams.get(key)
            if old is None and len(self._streams) >= conf.SSE_MAX_STREAMS:
                return Full("SSE_MAX_STREAMS", conf.SSE_MAX_STREAMS)
            owner = opener.owner if opener is not None else None
            if owner is not None and share > 0:
                held = self._owned[owner] - (1 if old is not None and _owner(old) == owner else 0)
                if held >= share:
                    return Full("SSE_MAX_STREAMS_PER_CREDENTIAL", share)
            if old is not None:
                self._unown(old)
            self._streams[key] = stream
            if owner is not None:
                self._owned[owner] += 1
            self._changes += 1
            metrics.set_sse_streams(len(self._streams))
            if old is None:
                self._gone.discard(key)
                self._new.add(key)
            if self._autostart:
                self._start()
        if old is not None:
            old.loop.call_soon_threadsafe(_hand_over, old, stream)
        self._wake.set()
        return stream

    def _unown(self, stream: Stream) -> None:
        """Under the lock: ``stream`` no longer counts against its credential's share."""
        owner = _owner(stream)
        if owner is not None:
            self._owned[owner] -= 1
            if self._owned[owner] <= 0:
                del self._owned[owner]

    def disconnect(self, stream: Stream) -> None:
        held = stream.close()
        key = (stream.group, stream.id)
        with self._lock:
            if self._streams.get(key) is stream:
                del self._streams[key]
                self._unown(stream)
                self._changes += 1
                metrics.set_sse_streams(len(self._streams))
                self._new.discard(key)
                self._gone.add(key)
            self._releases.extend(held)
        self._wake.set()

    def ack(self, items: list[Claimed]) -> None:
        with self._lock:
            self._acks.extend(items)
        self._wake.set()

    def release_later(self, items: list[Claimed]) -> None:
        with self._lock:
            self._releases.extend(items)
        self._wake.set()

    def wake(self, push: bool = False) -> None:
        self._wake.set()

    def count(self) -> int:
        with self._lock:
            return len(self._streams)

    def opened(self) -> dict[Key, int]:
        """When each stream this process holds was opened (ms), by ``(group, id)``."""
        with self._lock:
            return {key: stream.opened_at for key, stream in self._streams.items()}

    def end(self, stream: Stream, reason: str, registered: bool = True) -> None:
        """From the hub thread: take ``stream`` out of the hub at once (its routes are no longer
        claimed for) and end its response with ``reason``; what it held goes back to the outbox.
        ``registered``: whether its ``Subscriber`` row exists (and is to be deleted)."""
        key = (stream.group, stream.id)
        with self._lock:
            if self._streams.get(key) is not stream:
                return
            del self._streams[key]
            self._unown(stream)
            self._changes += 1
            metrics.set_sse_streams(len(self._streams))
            self._new.discard(key)
            if registered:
                self._gone.add(key)
        log.warning("SSE stream %r/%r closed: %s", stream.group, stream.id, reason)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is exiting
            stream.loop.call_soon_threadsafe(_end, stream, reason)

    # --- hub thread ------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None:
            wake.subscribe(self.wake)
            wake.listen(self.wake)
            self._thread = threading.Thread(target=self._run, name="resonate-hub", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(resonate_settings().POLL_FALLBACK_MS / 1000)
            self._wake.clear()
            try:
                close_old_connections()
                self.run_once()
            except Exception:
                log.exception("SSE delivery failed; retrying")
                self._wake.wait(0.5)

    def run_once(self) -> None:
        """Settle what the streams reported, end the streams whose credential is no longer
        valid, then deliver what is due for the others."""
        self._flush()
        self._check_credentials()
        self._deliver()

    def _flush(self) -> None:
        with self._lock:
            acks, self._acks = self._acks, []
            releases, self._releases = self._releases, []
            gone, self._gone = self._gone, set()
            new, self._new = self._new, set()
        try:
            self._settle(acks, releases, gone, new)
        except BaseException:
            # The database went away mid-way (a restart): keep all of it for the next pass. Each
            # statement is idempotent (acks and releases match on the claim's revision).
            with self._lock:
                self._acks[:0] = acks
                self._releases[:0] = releases
                self._gone |= {key for key in gone if key not in self._streams}
                self._new |= {key for key in new if key in self._streams}
            raise

    def _settle(
        self, acks: list[Claimed], releases: list[Claimed], gone: set[Key], new: set[Key]
    ) -> None:
        delivery.ack(acks)
        now = self.clock()
        delivery.release(releases, now)
        for group, stream_id in gone:
            try:
                with transaction.atomic():
                    Subscriber.objects.filter(
                        group=group, stream_id=stream_id, process=PROCESS
                    ).delete()
            except UNAVAILABLE:
                raise
            except Exception:  # left for the sweep of stale rows below
                log.exception(
                    "SSE stream %s/%s: its registration cannot be deleted", group, stream_id
                )
        # The registry is refreshed on connect and then once per fallback interval, not on every
        # wake-up (a wake-up follows every commit that wrote a message).
        fallback = resonate_settings().POLL_FALLBACK_MS
        if now - self._refreshed_at >= fallback:
            self._refreshed_at = now
            with self._lock:
                held = set(self._streams)
            refreshed = Subscriber.objects.filter(process=PROCESS).update(seen_at=now)
            if refreshed != len(held - new):
                # Our rows were swept while this hub could not refresh them (a long database
                # outage): register every stream we hold again.
                new = new | held
            # A sweep that read no Subscriber row for a stream registering at that moment may
            # have set its messages aside anyway: take them back on every refresh too.
            self._revive(held - new, now)
            # A web process that died without unregistering (SIGKILL, OOM) leaves its streams'
            # rows behind; they are ignored once stale, and deleted after a while.
            stale = now - max(STALE_SUBSCRIBER_MS, 20 * max(fallback, 1000))
            Subscriber.objects.filter(seen_at__lt=stale).delete()
        if new:
            self._register(new, now)
            with self._lock:
                registered = {key for key in new if key in self._streams}
            self._revive(registered, now)
            self._offer_backed_off(registered, now)
        # Counted once the pass went through (a failed pass is retried whole).
        metrics.record_deliveries("sse", delivered=len(acks))
        metrics.record_redeliveries("sse", len(releases))

    def _register(self, new: set[Key], now: int) -> None:
        """Write the ``Subscriber`` rows of new streams; a stream whose row the database refuses
        (its group or id cannot be stored) is ended, and the others are registered."""

        def write(keys: list[Key]) -> None:
            with transaction.atomic():
                Subscriber.objects.bulk_create(
                    [
                        Subscriber(group=g, stream_id=i, process=PROCESS, seen_at=now)
                        for g, i in keys
                    ],
                    update_conflicts=True,
                    unique_fields=["group", "stream_id", "process"],
                    update_fields=["seen_at"],
                )

        keys = sorted(new)
        try:
            write(keys)
            return
        except UNAVAILABLE:
            raise
        except Exception:
            if len(keys) == 1:
                self._refuse(keys[0])
                return
        for key in keys:  # one of them is refused: find which, register the others
            try:
                write([key])
            except UNAVAILABLE:
                raise
            except Exception:
                self._refuse(key)

    def _revive(self, keys: set[Key], now: int) -> None:
        """Once the streams ``keys`` are registered: their undeliverable unicast messages are
        due again (``delivery.revive``), and this pass claims them."""
        if not keys:
            return
        try:
            delivery.revive(sorted(f"{group}/{stream_id}" for group, stream_id in keys), now)
        except UNAVAILABLE:
            raise
        except Exception:  # a route the database refuses: its stream is ended at registration
            log.exception("SSE streams: their undeliverable messages cannot be taken back")

    def _offer_backed_off(self, new: set[Key], now: int) -> None:
        """New streams joined these groups: a task of theirs waiting out a release back-off is
        offered again now (the newcomer may have the function the others lacked)."""
        groups = sorted({group for group, _ in new})
        if not groups:
            return
        try:
            task_transitions.redispatch_backed_off(groups, now)
        except UNAVAILABLE:
            raise
        except Exception:
            log.exception("SSE streams: backed-off tasks of their groups cannot be offered")

    def _refuse(self, key: Key) -> None:
        log.exception("SSE stream %r/%r cannot be registered", *key)
        with self._lock:
            stream = self._streams.get(key)
        if stream is not None:
            self.end(stream, "the database refused this stream's group or id", registered=False)

    def _check_credentials(self) -> None:
        """End the streams whose credential was revoked (in any process: revocation is a row) or
        whose JWT expired; every ``CREDENTIAL_CHECK_MS``."""
        now = self.clock()
        if now - self._checked_at < CREDENTIAL_CHECK_MS:
            return
        self._checked_at = now
        with self._lock:
            opened = [(s, s.opener) for s in self._streams.values() if s.opener is not None]
        if not opened:
            return
        hashes = sorted({o.credential for _, o in opened if o.credential is not None})
        valid: set[str] = set()
        for i in range(0, len(hashes), CREDENTIAL_CHUNK):
            valid.update(
                ServiceCredential.objects.filter(
                    token_hash__in=hashes[i : i + CREDENTIAL_CHUNK], revoked_at__isnull=True
                ).values_list("token_hash", flat=True)
            )
        for stream, opener in opened:
            if opener.credential is not None and opener.credential not in valid:
                self.end(stream, "credential revoked")
            elif opener.expires_at is not None and opener.expires_at <= now:
                self.end(stream, "credential expired")

    def _held(self) -> tuple[dict[Key, Stream], list[str], dict[str, list[Stream]]]:
        """The streams, their routes (sorted) and the streams of each group."""
        with self._lock:
            streams = dict(self._streams)
            changes = self._changes
        if self._routes[0] != changes:
            routes: set[str] = set()
            by_group: dict[str, list[Stream]] = {}
            for (group, stream_id), stream in streams.items():
                routes.update(stream_routes(group, stream_id))
                by_group.setdefault(group, []).append(stream)
            self._routes = (changes, sorted(routes), by_group)
        return streams, self._routes[1], self._routes[2]

    def _deliver(self) -> None:
        conf = resonate_settings()
        batch = conf.DRAIN_BATCH
        lease = conf.IN_FLIGHT_MS + conf.SSE_ACK_GRACE_MS
        streams, routes, by_group = self._held()
        for i in range(0, len(routes), ROUTE_CHUNK):
            chunk = routes[i : i + ROUTE_CHUNK]
            while True:
                try:
                    items = delivery.claim_routes(chunk, self.clock(), batch, lease)
                except UNAVAILABLE:
                    raise
                except Exception:
                    # A route the database refuses: a stream connected during this pass, whose
                    # registration at the next pass ends it. The other chunks go on meanwhile.
                    log.exception("SSE claim failed for %d routes; trying again", len(chunk))
                    self._wake.set()
                    break
                unroutable = []
                for item in items:
                    try:
                        stream = _route(item, streams, by_group, self.clock())
                    except UNAVAILABLE:
                        raise
                    except Exception as exc:
                        log.exception("outbox message %s cannot be routed; dead-lettered", item.key)
                        error = f"cannot be routed: {delivery.error_text(exc)}"
                        delivery.dead_letter(item.key, item.revision, self.clock(), error)
                        continue
                    if stream is None or not _hand(stream, item):
                        unroutable.append(item)
                delivery.release(unroutable, self.clock())
                if len(items) < batch:
                    break


def per_credential_limit(setting: int, max_streams: int) -> int:
    """``SSE_MAX_STREAMS_PER_CREDENTIAL`` as a number of streams: -1 (the default) is half of
    ``SSE_MAX_STREAMS`` (at least 1), 0 no limit."""
    if setting < 0:
        return max(max_streams // 2, 1)
    return setting


def _owner(stream: Stream) -> str | None:
    return stream.opener.owner if stream.opener is not None else None


def _end(stream: Stream, reason: str) -> None:
    """On the stream's loop: end it with ``reason`` (``Stream.frames`` writes it last)."""
    if not stream.closed:
        stream.reason = reason
    stream.hub.disconnect(stream)


def _hand_over(old: Stream, new: Stream) -> None:
    """On ``old``'s loop: end it, and give the new stream everything it had not confirmed."""
    for item in old.close():
        if not _hand(new, item):
            new.hub.release_later([item])


def _disconnect_soon(stream: Stream) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: the server is exiting
        stream.loop.call_soon_threadsafe(stream.hub.disconnect, stream)


def _hand(stream: Stream, item: Claimed) -> bool:
    try:
        stream.loop.call_soon_threadsafe(stream.offer, item)
    except RuntimeError:  # the loop is closed: the server is shutting down
        return False
    return True


def _route(
    item: Claimed, streams: dict[Key, Stream], by_group: dict[str, list[Stream]], now: int
) -> Stream | None:
    address = parse_poll(item.address)
    if address is None:
        return None
    if address.id is not None:
        stream = streams.get((address.group, address.id))
        if stream is not None:
            return stream
    if address.mode == "uni":
        return None
    if address.id is not None and _connected_elsewhere(address.group, address.id, now):
        return None
    group = by_group.get(address.group)
    if not group:
        return None
    if item.avoid is not None and len(group) > 1:
        # An execute its last holder released: offer it to another stream of the group first.
        others = [stream for stream in group if stream.id != item.avoid]
        if others:
            return random.choice(others)
    return random.choice(group)


def _connected_elsewhere(group: str, stream_id: str, now: int) -> bool:
    fresh = subscriber_fresh_after(now)
    return (
        Subscriber.objects.filter(group=group, stream_id=stream_id, seen_at__gte=fresh)
        .exclude(process=PROCESS)
        .exists()
    )


_hub: Hub | None = None
_hub_lock = threading.Lock()


def get_hub() -> Hub:
    global _hub
    with _hub_lock:
        if _hub is None:
            _hub = Hub()
        return _hub
