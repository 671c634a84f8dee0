"""Internal steps owned by promises: R1 promise timeout and R3 listener drain (spec §5).

Each is ``(now, limit) -> count``: one transaction claiming at most ``limit`` due rows with
``SKIP LOCKED`` (so concurrent sweepers never process the same row), re-checking every guard.
"""

from __future__ import annotations

from django.db import transaction

from resonate_project.observability import metrics

from . import services
from .effects import Effects, finish
from .models import Listener, Promise, PromiseState
from .protocol import promise_record


def promise_timeouts(now: int, limit: int) -> int:
    """R1: settle external promises whose deadline has passed (C1: only external ones are armed;
    an internal promise's deadline is projection only)."""
    with transaction.atomic():
        due = list(
            Promise.objects.select_for_update(skip_locked=True)
            .filter(state=PromiseState.PENDING, external=True, timeout_at__lte=now)
            .order_by("timeout_at")[:limit]
        )
        deadlines = [p.timeout_at for p in due]
        fx = Effects()
        for p in due:
            services.time_out(p, fx)
        finish(fx, now, inline=True)
    metrics.record_lag("promise_timeouts", now, deadlines)
    return len(due)


def listener_drain(now: int, limit: int) -> int:
    """R3 for listeners left ready by a settlement made while the steps were paused."""
    from outbox import enqueue

    with transaction.atomic():
        rows = list(
            Listener.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("awaited")
            .filter(ready=True)[:limit]
        )
        for listener in rows:
            enqueue.unblock(promise_record(listener.awaited, now), listener.address, now)
        Listener.objects.filter(id__in=[r.id for r in rows]).delete()
        return len(rows)
