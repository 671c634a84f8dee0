"""The no-op task; it counts itself (one ``INCR``: no result backend to poll)."""

from __future__ import annotations

import os

import redis
from celery import shared_task

BROKER_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/7")
COUNTER_KEY = os.environ.get("BENCH_COUNTER_KEY", "bench-tasks-done")

_client: tuple[int, redis.Redis] | None = None


def counter() -> redis.Redis:
    """This process's connection (a prefork child makes its own)."""
    global _client
    if _client is None or _client[0] != os.getpid():
        _client = (os.getpid(), redis.Redis.from_url(BROKER_URL))
    return _client[1]


@shared_task(name="noop", ignore_result=True)
def noop() -> int:
    counter().incr(COUNTER_KEY)
    return 1
