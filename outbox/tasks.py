"""Celery interfaces: the metronome (``resonate.tick``, sent by beat and planned for the next
deadline) and the outbox drain (``resonate.drain``). Each calls one function."""

from __future__ import annotations

from celery import shared_task
from django.db import close_old_connections

from outbox import push
from resonate_project.core.conf import resonate_settings
from resonate_project.runtime import ticker


@shared_task(name="resonate.tick", ignore_result=True)
def tick(at: int | None = None) -> int:
    """Run every due internal step (skipped while debug.start has paused them), then plan the
    tick for the next deadline. ``at``: set on a tick planned for that instant (ms)."""
    close_old_connections()  # drop a connection that failed (CELERY_DB_REUSE_MAX keeps them)
    return ticker.celery_tick(at)


@shared_task(name="resonate.drain", ignore_result=True)
def drain() -> int:
    """Push every due http(s) message; SSE messages are delivered by the web process that holds
    the stream."""
    close_old_connections()
    return push.drain_push(resonate_settings().DRAIN_BATCH)
