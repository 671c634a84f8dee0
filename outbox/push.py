"""HTTP push: POST each message for an ``http://``/``https://`` address as JSON."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

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
    """Deliver up to ``limit`` due push messages; returns how many were claimed."""
    items = delivery.claim(delivery.PUSH_Q, now, limit)
    if not items:
        return 0
    conf = resonate_settings()
    with _client() as client, ThreadPoolExecutor(max_workers=conf.PUSH_CONCURRENCY) as pool:
        outcomes = list(pool.map(lambda item: _post(client, item), items))
    delivered = [item for item, error in zip(items, outcomes, strict=True) if error is None]
    delivery.ack(delivered)
    failed_at = now_ms()
    for item, error in zip(items, outcomes, strict=True):
        if error is not None:
            log.info("push to %s failed (attempt %d): %s", item.address, item.attempts, error)
            delivery.fail(item, failed_at, error)
    return len(items)


def drain_push(limit: int) -> int:
    """Push until no full batch remains."""
    total = 0
    while True:
        n = push_due(now_ms(), limit)
        total += n
        if n < limit:
            return total
