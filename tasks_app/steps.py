"""Internal steps owned by tasks (R4 callback drain, R5 lease expiry, R6 retry/dispatch) and the
runner that drives every step (spec §5).

Each step is ``(now, limit) -> count``: one transaction claiming at most ``limit`` due rows with
``SKIP LOCKED``, re-checking every guard ("an armed timer means not before").
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.db import transaction
from opentelemetry import trace

from promises import services
from promises.effects import Effects, finish
from promises.models import Callback, Promise
from promises.protocol import is_live
from promises.steps import listener_drain, promise_timeouts
from resonate_project.observability import metrics
from schedules.steps import schedule_fire

from . import transitions
from .models import Task, TaskState


def _due_tasks(state: str, field: str, now: int, limit: int) -> list[tuple[Task, Promise]]:
    """Claim the promises of due tasks (SKIP LOCKED), then read their tasks after the locks are
    held and keep those still due (see ``tasks_app/locks.py`` for why the task is re-read)."""
    claimed = list(
        Promise.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(**{"task__state": state, f"task__{field}__lte": now})
        .order_by(f"task__{field}")[:limit]
    )
    tasks = {t.pk: t for t in Task.objects.filter(pk__in=[p.id for p in claimed])}
    due = []
    for p in claimed:
        task = tasks.get(p.id)
        deadline = None if task is None else getattr(task, field)
        if task is not None and task.state == state and deadline is not None and deadline <= now:
            due.append((task, p))
    return due


def lease_expiry(now: int, limit: int) -> int:
    """R5: an acquired task whose lease passed goes back to pending (same version) and is
    dispatched again. If its promise is dead it is not re-pended (C5): its timeout is applied
    instead, which fulfils it."""
    with transaction.atomic():
        due = _due_tasks(TaskState.ACQUIRED, "expires_at", now, limit)
        deadlines = [task.expires_at or now for task, _ in due]  # before they change
        fx = Effects()
        for task, p in due:
            if is_live(p, now):
                transitions.make_pending(task, p, now, fx)
            else:
                services.time_out(p, fx)
        finish(fx, now, inline=True)
    metrics.record_lag("lease_expiry", now, deadlines)
    return len(due)


def retry_dispatch(now: int, limit: int) -> int:
    """R6: a pending task nobody acquired is offered again every RETRY_TIMEOUT_MS. No dispatch for
    the dead (C5): a task whose promise is dead gets its timeout applied instead."""
    with transaction.atomic():
        due = _due_tasks(TaskState.PENDING, "retry_at", now, limit)
        deadlines = [task.retry_at or now for task, _ in due]  # before they change
        fx = Effects()
        for task, p in due:
            if is_live(p, now):
                transitions.dispatch(task, p, now)
            else:
                services.time_out(p, fx)
        finish(fx, now, inline=True)
    metrics.record_lag("retry_dispatch", now, deadlines)
    return len(due)


def callback_drain(now: int, limit: int) -> int:
    """R4 for callbacks left ready (the awaiter was busy at settlement, or the steps were
    paused): resume each awaiter, with the deadline guard of C6."""
    with transaction.atomic():
        rows = list(Callback.objects.select_for_update(skip_locked=True).filter(ready=True)[:limit])
        fx = Effects()
        done: list[int] = []
        by_awaited: dict[str, list[Callback]] = {}
        for cb in rows:
            by_awaited.setdefault(cb.awaited_id, []).append(cb)
        for awaited_id, cbs in by_awaited.items():
            handled = set(
                services.resume_awaiters(awaited_id, [cb.awaiter_id for cb in cbs], now, fx)
            )
            done.extend(cb.id for cb in cbs if cb.awaiter_id in handled)
        Callback.objects.filter(id__in=done).delete()
        finish(fx, now, inline=True)
        return len(done)


Step = Callable[[int, int], int]
STEPS: tuple[Step, ...] = (
    promise_timeouts,
    schedule_fire,
    lease_expiry,
    retry_dispatch,
    listener_drain,
    callback_drain,
)


# The OpenTelemetry API: a no-op unless resonate_project.observability.tracing installed a provider.
_tracer = trace.get_tracer("resonate.steps")


def run_due(now: int, limit: int) -> int:
    """Run every internal step until none finds a full batch; returns the rows processed."""
    # One trace per tick: its steps, and their queries, are children rather than traces each.
    with _tracer.start_as_current_span("resonate tick") as span:
        total = _run_steps(now, limit)
        span.set_attribute("resonate.rows", total)
        return total


def _run_steps(now: int, limit: int) -> int:
    total = 0
    for step in STEPS:
        while True:
            started = time.perf_counter()
            with _tracer.start_as_current_span(f"resonate step {step.__name__}") as span:
                n = step(now, limit)
                span.set_attribute("resonate.rows", n)
            metrics.record_step(step.__name__, n, time.perf_counter() - started)
            total += n
            if n < limit:
                break
    return total
