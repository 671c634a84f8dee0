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


_clients: dict[tuple[str, int, int], httpx.Client] = {}
_pools: dict[int, ThreadPoolExecutor] = {}


def _client() -> httpx.Client:
    """One client per process and configuration: keep-alive connections are reused across rounds
    (a new client per round re-read the CA bundle and reconnected every time)."""
    conf = resonate_settings()
    key = (conf.PUSH_BEARER_TOKEN, conf.PUSH_TIMEOUT_MS, conf.PUSH_CONCURRENCY)
    client = _clients.get(key)
    if client is None:
        headers = {"Content-Type": "application/json"}
        if conf.PUSH_BEARER_TOKEN:
            headers["Authorization"] = f"Bearer {conf.PUSH_BEARER_TOKEN}"
        limits = httpx.Limits(max_connections=conf.PUSH_CONCURRENCY * 2)
        client = _clients[key] = httpx.Client(
            timeout=conf.PUSH_TIMEOUT_MS / 1000, headers=headers, limits=limits
        )
    return client


def _pool(size: int) -> ThreadPoolExecutor:
    pool = _pools.get(size)
    if pool is None:
        pool = _pools[size] = ThreadPoolExecutor(max_workers=size, thread_name_prefix="push")
    return pool


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
    client, pool = _client(), _pool(conf.PUSH_CONCURRENCY)
    futures = {pool.submit(_post, client, item): item for item in items}
    delivered = []
    for future in as_completed(futures):
        item, error = futures[future], future.result()
        if error is None:
            delivered.append(item)
        else:
            log.info("push to %s failed (attempt %d): %s", item.address, item.attempts, error)
            delivery.fail(item, now_ms(), error)
    delivery.ack(delivered)  # one statement per round; the round is bounded by PUSH_TIMEOUT_MS
    return len(items)


def drain_push(limit: int) -> int:
    """Push in rounds of at most ``limit`` until no message is due."""
    total = 0
    while n := push_due(now_ms(), limit):
        total += n
    return total
