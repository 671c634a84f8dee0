"""HTTP push: POST each message for an ``http://``/``https://`` address as JSON.

Requests go out on one asyncio event loop per process (a daemon thread) through one aiohttp
session per configuration, so a round of ``PUSH_CONCURRENCY`` messages is in flight at once over
kept-alive connections. (Measured here: aiohttp sends ~8,800 requests/s from one core where a
thread pool of httpx clients managed ~1,100.)
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import aiohttp

from promises.clock import now_ms
from promises.conf import resonate_settings

from . import delivery
from .delivery import Claimed

log = logging.getLogger("resonate.push")
T = TypeVar("T")


class _Sender:
    """The process's push event loop; created on first use, so a forked worker makes its own."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.sessions: dict[tuple[str, int, int], aiohttp.ClientSession] = {}
        threading.Thread(target=self.loop.run_forever, name="resonate-push-io", daemon=True).start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def session(self) -> aiohttp.ClientSession:
        conf = resonate_settings()
        key = (conf.PUSH_BEARER_TOKEN, conf.PUSH_TIMEOUT_MS, conf.PUSH_CONCURRENCY)
        session = self.sessions.get(key)
        if session is None:
            headers = {"Content-Type": "application/json"}
            if conf.PUSH_BEARER_TOKEN:
                headers["Authorization"] = f"Bearer {conf.PUSH_BEARER_TOKEN}"
            session = self.sessions[key] = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=conf.PUSH_TIMEOUT_MS / 1000),
                connector=aiohttp.TCPConnector(limit=conf.PUSH_CONCURRENCY),
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


async def _post(session: aiohttp.ClientSession, item: Claimed) -> str | None:
    """None when delivered (any 2xx), else what went wrong."""
    try:
        async with session.post(item.address, data=item.body) as res:
            text = await res.text(errors="replace")
            if 200 <= res.status < 300:
                return None
            return f"HTTP {res.status}: {text[:200]}"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


async def _post_all(sender: _Sender, items: list[Claimed]) -> list[str | None]:
    session = sender.session()
    return list(await asyncio.gather(*(_post(session, item) for item in items)))


def push_due(now: int, limit: int) -> int:
    """Deliver up to ``limit`` due push messages; returns how many were claimed.

    A claim is no larger than the requests allowed in flight, so every claimed message is sent
    at once and the round lasts at most ``PUSH_TIMEOUT_MS``, well inside its ``IN_FLIGHT_MS``
    lease (a system check keeps the lease longer than twice the timeout). The delivered ones are
    acknowledged in one statement.
    """
    conf = resonate_settings()
    items = delivery.claim(delivery.PUSH_Q, now, min(limit, conf.PUSH_CONCURRENCY))
    if not items:
        return 0
    sender = _get_sender()
    outcomes = sender.run(_post_all(sender, items))
    delivered = []
    for item, error in zip(items, outcomes, strict=True):
        if error is None:
            delivered.append(item)
        else:
            log.info("push to %s failed (attempt %d): %s", item.address, item.attempts, error)
            delivery.fail(item, now_ms(), error)
    delivery.ack(delivered)
    return len(items)


def drain_push(limit: int) -> int:
    """Push in rounds of at most ``limit`` until no message is due."""
    total = 0
    while n := push_due(now_ms(), limit):
        total += n
    return total
