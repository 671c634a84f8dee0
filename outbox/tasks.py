"""Celery interfaces: beat's metronome (``resonate.tick``) and the outbox drain
(``resonate.drain``). Each reads the clock once and calls one function."""

from __future__ import annotations

from celery import shared_task

from outbox import push, ticker
from resonate_project.core.conf import resonate_settings


@shared_task(name="resonate.tick", ignore_result=True)
def tick() -> int:
    """Run every due internal step (skipped while debug.start has paused them)."""
    return ticker.tick_once()


@shared_task(name="resonate.drain", ignore_result=True)
def drain() -> int:
    """Push every due http(s) message; SSE messages are delivered by the web process that holds
    the stream."""
    return push.drain_push(resonate_settings().DRAIN_BATCH)
