"""HTTP push: POST each message for an ``http://``/``https://`` address as JSON."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor, as_completed

import httpx

from promises.clock import now_ms
from promises.conf import resonate_settings

from . import delivery
from .delivery import Claimed

log = logging.getLogger("resonate.push")


def _post(client: httpx.Client, item: Claimed) -> str | None:
    """None when delivered (any 2xx), else what went wrong."""
    try:
        res = client.post(item.address, content=item.body)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    if 200 <= res.status_code < 300:
        return None
    return f"HTTP {res.status_code}: {res.text[:200]}"


def _client() -> httpx.Client:
    conf = resonate_settings()
    headers = {"Content-Type": "application/json"}
    if conf.PUSH_BEARER_TOKEN:
        headers["Authorization"] = f"Bearer {conf.PUSH_BEARER_TOKEN}"
    return httpx.Client(timeout=conf.PUSH_TIMEOUT_MS / 1000, headers=headers)


def push_due(now: int, limit: int) -> int:
    """Deliver up to ``limit`` due push messages; returns how many were claimed.

    Each message is acknowledged as soon as its POST succeeds. Claims are no larger than the
    number of requests in flight, so a claimed message waits at most one ``PUSH_TIMEOUT_MS``
    before its POST starts, well inside its ``IN_FLIGHT_MS`` lease (a system check keeps the
    lease longer than twice the timeout).
    """
    conf = resonate_settings()
    items = delivery.claim(delivery.PUSH_Q, now, min(limit, conf.PUSH_CONCURRENCY))
    if not items:
        return 0
    with _client() as client, ThreadPoolExecutor(max_workers=conf.PUSH_CONCURRENCY) as pool:
        futures = {pool.submit(_post, client, item): item for item in items}
        for future in as_completed(futures):
            item, error = futures[future], future.result()
            if error is None:
                delivery.ack([item])
            else:
                log.info("push to %s failed (attempt %d): %s", item.address, item.attempts, error)
                delivery.fail(item, now_ms(), error)
    return len(items)


def drain_push(limit: int) -> int:
    """Push in rounds of at most ``limit`` until no message is due."""
    total = 0
    while n := push_due(now_ms(), limit):
        total += n
    return total
