"""HTTP push: POST each message for an ``http://``/``https://`` address as JSON, only where the
push policy lets it go (docs/how-to/push.md, docs/explanation/security.md#http-push).

Requests go out on one asyncio event loop per process (a daemon thread) through one aiohttp
session per configuration, over kept-alive connections. (Measured here: aiohttp sends ~8,800
requests/s from one core where a thread pool of httpx clients managed ~1,100.)

What a request may do:

- **Where.** The address is checked as written (``core.addresses.push_refusal``: its form
  and IP literals), then the session's resolver checks every IP a host name resolves to and
  fails the lookup if any is refused. aiohttp connects only to the IPs the resolver returned,
  so there is no second lookup to rebind; the Host header and TLS server name stay those of the
  URL. A refusal is a failed attempt whose error says why.
- **No redirects.** A 3xx is a failed attempt recording its status and ``Location``.
- **Credentials** (``PUSH_CREDENTIALS``) go as ``Authorization`` to their own host only.
- **Bodies** are read up to ``PUSH_MAX_RESPONSE_BYTES`` (and never decompressed); the
  connection is then dropped.

Isolation. A drain keeps up to ``PUSH_CONCURRENCY`` requests in flight and settles each as it
completes, refilling free slots from the outbox; a round never waits for its slowest request.
It looks ``LOOKAHEAD`` times as far into the due messages as it has slots, and takes only those
whose destination (scheme, host and port) has fewer than ``PUSH_PER_HOST_CONCURRENCY`` requests
in flight, leaving the others where they are. A destination that could not be reached (no
answer within ``PUSH_TIMEOUT_MS``, connection refused, refused by the policy) *cools*: its other
due messages are put back, untried, until the failed one's own retry, so its backlog neither
holds the front of the queue nor is sent into a dead host.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import socket
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Coroutine
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from ipaddress import ip_address
from typing import Any, TypeVar

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from django.db.models import Q
from opentelemetry import context, propagate, trace
from yarl import URL

from outbox import delivery
from outbox.delivery import Claimed
from outbox.models import PUSH_Q, Message
from resonate_project import USER_AGENT
from resonate_project.core import addresses
from resonate_project.core.addresses import Allowlist
from resonate_project.core.clock import now_ms
from resonate_project.core.conf import ResonateSettings, resonate_settings
from resonate_project.observability import metrics

log = logging.getLogger("resonate.push")
# The OpenTelemetry API: a no-op unless resonate_project.observability.tracing installed a provider.
_tracer = trace.get_tracer("resonate.push")
T = TypeVar("T")

# How long a drain with free slots waits for more requests to finish before it claims again
# (one indexed claim query per interval while requests are in flight).
REFILL_S = 0.05


class Refused(OSError):
    """A destination the push policy refuses; raised by the resolver, so nothing connects."""


class _CheckedResolver(AbstractResolver):
    """Resolves once with getaddrinfo and refuses the host if any of its IPs is refused."""

    def __init__(self, allowed: Allowlist) -> None:
        self._inner = ThreadedResolver()
        self._allowed = allowed

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            reason = addresses.resolved_refusal(host, ip_address(result["host"]), self._allowed)
            if reason is not None:
                raise Refused(reason)
        return results

    async def close(self) -> None:
        await self._inner.close()


class _Sender:
    """The process's push event loop; created on first use, so a forked worker makes its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.sessions: dict[tuple[int, int, str], aiohttp.ClientSession] = {}
        threading.Thread(target=self.loop.run_forever, name="resonate-push-io", daemon=True).start()
        atexit.register(self.close)

    def close(self) -> None:
        """Close the sessions (at exit), so no connection is left for the collector to warn of."""

        async def close_all() -> None:
            for session in list(self.sessions.values()):
                await session.close()

        with contextlib.suppress(Exception):
            self.submit(close_all()).result(timeout=5)

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def session(self, conf: ResonateSettings) -> aiohttp.ClientSession:
        """On the loop. One per (timeout, concurrency, allowlist): the resolver holds the list."""
        key = (conf.PUSH_TIMEOUT_MS, conf.PUSH_CONCURRENCY, conf.PUSH_ALLOWED)
        session = self.sessions.get(key)
        if session is None:
            resolver = _CheckedResolver(addresses.parse_allowed(conf.PUSH_ALLOWED))
            session = self.sessions[key] = aiohttp.ClientSession(
                headers={"Content-Type": "application/json", "User-Agent": USER_AGENT},
                timeout=aiohttp.ClientTimeout(total=conf.PUSH_TIMEOUT_MS / 1000),
                connector=aiohttp.TCPConnector(limit=conf.PUSH_CONCURRENCY, resolver=resolver),
                auto_decompress=False,
            )
        return session


_sender: _Sender | None = None
_sender_lock = threading.Lock()


def _get_sender() -> _Sender:
    global _sender
    with _sender_lock:
        if _sender is None:
            _sender = _Sender()
        return _sender


async def _read_at_most(res: aiohttp.ClientResponse, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = await res.content.read(limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if not res.content.at_eof():
        res.close()  # the rest is never read: drop the connection rather than drain it
    return b"".join(chunks)


@dataclass(frozen=True, slots=True)
class Outcome:
    error: str | None  # None: delivered (a 2xx)
    reached: bool = True  # False: no answer (refused, unreachable, hung up, timed out)


async def _post(
    sender: _Sender, conf: ResonateSettings, item: Claimed, trace_headers: dict[str, str]
) -> Outcome:
    """``trace_headers``: the drain's W3C trace context (empty when tracing is off). The request
    runs on the push loop's thread, so the context is attached here, where the aiohttp client
    instrumentation (if on) finds it for its span; without it, the headers go as they are."""
    if not trace_headers:
        return await _send(sender, conf, item, {})
    token = context.attach(propagate.extract(trace_headers))
    try:
        return await _send(sender, conf, item, dict(trace_headers))
    finally:
        context.detach(token)


async def _send(
    sender: _Sender, conf: ResonateSettings, item: Claimed, headers: dict[str, str]
) -> Outcome:
    allowed = addresses.parse_allowed(conf.PUSH_ALLOWED)
    refusal = addresses.push_refusal(item.address, allowed, names=False)
    try:
        url = URL(item.address)
    except ValueError as exc:
        return Outcome(f"refused: address {item.address} is not a valid URL ({exc})", False)
    # The host as aiohttp sees it: an IP literal never reaches the resolver, a name does.
    refusal = refusal or addresses.host_refusal(url.raw_host or "", allowed, names=False)
    if refusal is not None:
        return Outcome(f"refused: address {item.address} {refusal}", False)
    credential = addresses.credential_for(
        addresses.parse_credentials(conf.PUSH_CREDENTIALS), url.raw_host or "", url.explicit_port
    )
    if credential is not None:
        headers["Authorization"] = credential
    try:
        async with sender.session(conf).post(
            url, data=item.body, headers=headers, allow_redirects=False
        ) as res:
            body = await _read_at_most(res, conf.PUSH_MAX_RESPONSE_BYTES)
            if 200 <= res.status < 300:
                return Outcome(None)
            if 300 <= res.status < 400:
                location = res.headers.get("Location", "")[:200]
                return Outcome(f"HTTP {res.status}: redirect not followed (Location: {location})")
            return Outcome(f"HTTP {res.status}: {body[:200].decode(errors='replace')}")
    except TimeoutError:
        return Outcome(f"TimeoutError: no answer within {conf.PUSH_TIMEOUT_MS} ms", False)
    except aiohttp.ClientConnectorError as exc:
        if isinstance(exc.os_error, Refused):
            return Outcome(f"refused: address {item.address}: {exc.os_error}", False)
        return Outcome(f"{type(exc).__name__}: {exc}", False)
    except aiohttp.ClientConnectionError as exc:  # e.g. the server hung up without answering
        return Outcome(f"{type(exc).__name__}: {exc}", False)
    except (aiohttp.ClientError, ValueError) as exc:
        return Outcome(f"{type(exc).__name__}: {exc}")


def destination(address: str) -> str:
    """The ``scheme://host:port`` part of a push address, case-folded: what the per-destination
    limit and cooling count by."""
    scheme, _, rest = address.partition("://")
    ends = [i for i in (rest.find(c) for c in "/?#") if i >= 0]
    return f"{scheme}://{rest[: min(ends, default=len(rest))]}".lower()


# How much further than its free slots a drain looks into the due messages for destinations
# with room (rows read per claim: LOOKAHEAD x the claim size, from the due index).
LOOKAHEAD = 4


@dataclass
class _Pump:
    """One drain: claims into free slots, settles each request as it completes."""

    conf: ResonateSettings
    sender: _Sender
    limit: int
    trace_headers: dict[str, str] = field(default_factory=dict)
    in_flight: dict[Future[Outcome], tuple[Claimed, str]] = field(default_factory=dict)
    busy: Counter[str] = field(default_factory=Counter)
    cooling: dict[str, int] = field(default_factory=dict)  # destination -> until (ms)
    finished: list[tuple[Claimed, str, Outcome]] = field(default_factory=list)
    claimed: int = 0

    def run(self, deadline: float | None) -> int:
        while True:
            self.settle()
            free = self.conf.PUSH_CONCURRENCY - len(self.in_flight)
            if free > 0 and (deadline is None or time.monotonic() < deadline):
                self.fill(min(free, self.limit))
            if not self.in_flight:
                self.settle()
                return self.claimed
            self.wait(refill_at=max(1, len(self.in_flight) // 2))

    def fill(self, n: int) -> None:
        """Claim and start up to ``n`` due messages whose destinations have room; put back the
        due messages of cooling destinations. The due rows are read first without a lock, so
        the claim takes only what can start now."""
        cap = self.conf.PUSH_PER_HOST_CONCURRENCY
        now = now_ms()
        due = (
            Message.objects.filter(PUSH_Q, next_attempt_at__lte=now, dead_at__isnull=True)
            .order_by("next_attempt_at")
            .values_list("key", "address")[: n * LOOKAHEAD]
        )
        room: dict[str, int] = {}
        keys: list[str] = []
        put_back: defaultdict[int, list[str]] = defaultdict(list)
        for key, address in due:
            dest = destination(address)
            until = self.cooling.get(dest, 0)
            if until > now:
                put_back[until].append(key)
                continue
            left = room.setdefault(dest, cap - self.busy[dest])
            if left > 0 and len(keys) < n:
                room[dest] = left - 1
                keys.append(key)
        for until, cooled in put_back.items():
            delivery.defer(cooled, now, until)
        if not keys:
            return
        items = delivery.claim(PUSH_Q & Q(key__in=keys), now, len(keys))
        self.claimed += len(items)
        metrics.add_push_in_flight(len(items))
        for item in items:
            dest = destination(item.address)
            self.busy[dest] += 1
            future = self.sender.submit(_post(self.sender, self.conf, item, self.trace_headers))
            self.in_flight[future] = (item, dest)

    def wait(self, refill_at: int) -> None:
        """Until ``refill_at`` requests have finished, or ``REFILL_S`` has passed with a slot
        free (then more may have fallen due)."""
        deadline = time.monotonic() + REFILL_S
        finished = 0
        while self.in_flight and finished < refill_at:
            free = self.conf.PUSH_CONCURRENCY - len(self.in_flight)
            timeout = None if free == 0 else deadline - time.monotonic()
            if timeout is not None and timeout <= 0:
                return
            done, _ = wait(self.in_flight, timeout=timeout, return_when=FIRST_COMPLETED)
            finished += len(done)
            metrics.add_push_in_flight(-len(done))
            for future in done:
                item, dest = self.in_flight.pop(future)
                self.busy[dest] -= 1
                try:
                    outcome = future.result()
                except Exception as exc:  # a bug; it must not stop the other messages
                    log.exception("push to %s raised", item.address)
                    outcome = Outcome(f"{type(exc).__name__}: {exc}")
                self.finished.append((item, dest, outcome))

    def settle(self) -> None:
        delivered = []
        retried = 0
        now = now_ms()
        for item, dest, outcome in self.finished:
            if outcome.error is None:
                delivered.append(item)
                self.cooling.pop(dest, None)
                continue
            if not outcome.reached:
                # The destination's other due messages wait as long as this one.
                retry_at = now + delivery.backoff_ms(item.attempts)
                self.cooling[dest] = max(self.cooling.get(dest, 0), retry_at)
            try:
                dead = delivery.fail(item, now, outcome.error)
            except delivery.UNAVAILABLE:
                raise
            except Exception:  # this row's write only: the others are settled all the same
                log.exception("push to %s: its failure cannot be recorded", item.address)
                continue  # its lease lapses and it is tried again
            if dead:
                log.warning(
                    "push to %s dead-lettered after %d attempts: %s",
                    item.address,
                    item.attempts,
                    outcome.error,
                )
            else:
                retried += 1
                log.info(
                    "push to %s failed (attempt %d): %s", item.address, item.attempts, outcome.error
                )
        delivery.ack(delivered)
        failed = len(self.finished) - len(delivered)
        metrics.record_deliveries("push", delivered=len(delivered), failed=failed)
        metrics.record_redeliveries("push", retried)
        self.finished.clear()


def drain_push(limit: int, max_seconds: float | None = None) -> int:
    """Push every due message, claiming at most ``limit`` per statement; returns how many were
    claimed. Returns when nothing is due and nothing is in flight (or, with ``max_seconds``,
    claims nothing after that long and returns once what is in flight has finished)."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    with _tracer.start_as_current_span("resonate drain") as span:
        trace_headers: dict[str, str] = {}
        propagate.inject(trace_headers)  # nothing when tracing is off
        pump = _Pump(resonate_settings(), _get_sender(), limit, trace_headers)
        claimed = pump.run(deadline)
        span.set_attribute("resonate.claimed", claimed)
        return claimed
