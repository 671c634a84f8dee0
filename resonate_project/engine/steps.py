"""The internal steps (spec §5): R1 promise timeout, R7 schedule fire, R5 lease expiry, R6 retry
dispatch, R3 listener drain, R4 callback drain, and the runner that drives them.

Each step is ``(now, limit) -> count``: one unit of work claiming at most ``limit`` due rows with
``SKIP LOCKED`` (so concurrent sweepers never process the same row), re-checking every guard ("an
armed timer means not before").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from django.db import connection
from opentelemetry import trace

from promises.models import Callback, Listener, Promise
from resonate_project.core import cron
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import promise_record
from resonate_project.core.schedules import expand
from resonate_project.core.tags import BRANCH, SCHEDULE
from resonate_project.core.wire.promises import PromiseCreateReq, Value, later
from resonate_project.engine import promises, rows, tasks, wake
from resonate_project.engine.effects import Effects
from resonate_project.engine.locks import due_tasks_for_update
from resonate_project.engine.uow import unit_of_work
from resonate_project.observability import metrics
from schedules.models import Schedule
from tasks_app.models import Task, TaskState


def promise_timeouts(now: int, limit: int) -> int:
    """R1: settle external promises whose deadline has passed (C1: only external ones are armed;
    an internal promise's deadline is projection only)."""
    with unit_of_work(now, steps=True) as fx:
        due = rows.due(Promise, _ARMED, "timeout_at", now, limit)
        deadlines = [p.timeout_at for p in due]
        for p in due:
            promises.time_out(p, fx)
    metrics.record_lag("promise_timeouts", now, deadlines)
    return len(due)


def listener_drain(now: int, limit: int) -> int:
    """R3 for listeners left ready by a settlement made while the steps were paused."""
    with unit_of_work(now, steps=True):
        found = list(
            Listener.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("awaited")
            .filter(ready=True)[:limit]
        )
        records = {r.awaited_id: promise_record(r.awaited, now) for r in found}
        triples = [(r.id, r.awaited_id, r.address) for r in found]
        return promises.unblock_listeners(triples, records, now)


def callback_drain(now: int, limit: int) -> int:
    """R4 for callbacks left ready (the awaiter was busy at settlement, or the steps were
    paused): resume each awaiter, with the deadline guard of C6."""
    with unit_of_work(now, steps=True) as fx:
        found = list(
            Callback.objects.select_for_update(skip_locked=True)
            .filter(ready=True)
            .values_list("id", "awaited_id", "awaiter_id")[:limit]
        )
        busy = promises.resume_callbacks(found, now, fx)
        return len(found) - len(busy)


def schedule_fire(now: int, limit: int) -> int:
    """R7: create every occurrence due in ``[nextRunAt, now]``, each as if at its own instant, up
    to ``SCHEDULE_CATCHUP_BATCH`` per schedule per call; returns the occurrences fired."""
    per_schedule = resonate_settings().SCHEDULE_CATCHUP_BATCH
    fired = 0
    instants: list[int] = []
    with unit_of_work(now, steps=True) as fx:
        due = list(
            Schedule.objects.select_for_update(skip_locked=True)
            .filter(next_run_at__lte=now)
            .order_by("next_run_at")[:limit]
        )
        for s in due:
            instant, count = s.next_run_at, 0
            while instant <= now and count < per_schedule and fired < limit:
                occur(s, instant, fx)
                instants.append(instant)
                s.last_run_at = instant
                instant = cron.next_after(s.cron, instant)
                count += 1
                fired += 1
            s.next_run_at = instant
            s.save(update_fields=["last_run_at", "next_run_at"])
            wake.deadline(instant, now)
    metrics.record_lag("schedule_fire", now, instants)
    return fired


def occur(s: Schedule, instant: int, fx: Effects) -> None:
    """Create-if-absent the occurrence promise, evaluated at ``instant`` (createdAt = instant; a
    backlogged occurrence past its deadline reads as timed out and is never dispatched)."""
    promise_id = expand(s.promise_id, s.id, instant)
    if Promise.objects.filter(id=promise_id).exists():
        return
    req = PromiseCreateReq(
        id=promise_id,
        timeout_at=later(instant, s.promise_timeout),
        param=Value(headers=s.promise_param_headers, data=s.promise_param_data),
        tags={**s.promise_tags, **occurrence_tags(s.id, promise_id)},
    )
    promises.create_with_task(req, instant, fx)
    metrics.record_schedule_promise()


def occurrence_tags(schedule_id: str, promise_id: str) -> dict[str, str]:
    """Tags the server adds to each occurrence, overriding the schedule's own (as the reference
    server): the occurrence is the root of its own call tree."""
    return {
        SCHEDULE: schedule_id,
        "resonate:origin": promise_id,
        BRANCH: promise_id,
        "resonate:parent": promise_id,
        "resonate:prefix": promise_id,
    }


def lease_expiry(now: int, limit: int) -> int:
    """R5: an acquired task whose lease passed goes back to pending (same version) and is
    dispatched again. If its promise is dead it is not re-pended (C5): its timeout is applied
    instead, which fulfils it."""
    with unit_of_work(now, steps=True) as fx:
        due = due_tasks_for_update(TaskState.ACQUIRED, "expires_at", now, limit)
        deadlines = [task.expires_at or now for task, _ in due]  # before they change
        for task, p in due:
            if promises.live_or_time_out(p, now, fx):
                tasks.make_pending(task, p, now, fx)
    metrics.record_lag("lease_expiry", now, deadlines)
    return len(due)


def retry_dispatch(now: int, limit: int) -> int:
    """R6: a pending task nobody acquired is offered again every RETRY_TIMEOUT_MS. No dispatch for
    the dead (C5): a task whose promise is dead gets its timeout applied instead."""
    with unit_of_work(now, steps=True) as fx:
        due = due_tasks_for_update(TaskState.PENDING, "retry_at", now, limit)
        deadlines = [task.retry_at or now for task, _ in due]  # before they change
        for task, p in due:
            if promises.live_or_time_out(p, now, fx):
                tasks.dispatch(task, p, now)
    metrics.record_lag("retry_dispatch", now, deadlines)
    return len(due)


# Per step with a deadline: the table, its column, the partial index the step sweeps and that
# index's condition (repeated verbatim: SQLite uses a partial index only for a query implying it).
_ARMED = '"external" AND "state" = \'pending\''  # promise_armed_timeout's condition
_DEADLINES = (
    (promise_timeouts, Promise, "timeout_at", "promise_armed_timeout", _ARMED),
    (schedule_fire, Schedule, "next_run_at", "schedule_due", ""),
    (lease_expiry, Task, "expires_at", "task_due_lease", "\"state\" = 'acquired'"),
    (retry_dispatch, Task, "retry_at", "task_due_retry", "\"state\" = 'pending'"),
)


def due_heads() -> dict[Callable[[int, int], int], int]:
    """The earliest deadline each step with deadlines waits for (R1 timeout, R7 next run, R5 lease
    expiry, R6 retry); a step with none is absent. One statement of four ``ORDER BY … LIMIT 1``
    subqueries, each reading the first entry of the partial index its step sweeps: one index probe
    per kind whatever the table sizes. (SQLite's planner, without statistics, would rather use
    ``promise_state_id`` and sort every pending promise: there the index is named.) The drains
    (R3, R4) have no deadline: their rows are ready at once, and run inline."""
    qn = connection.ops.quote_name
    sqlite = connection.vendor == "sqlite"
    heads = []
    for _, model, column, index, condition in _DEADLINES:
        hint = f" INDEXED BY {qn(index)}" if sqlite else ""
        where = " AND ".join(c for c in (condition, f"{qn(column)} IS NOT NULL") if c)
        heads.append(
            f"(SELECT {qn(column)} FROM {qn(model._meta.db_table)}{hint} WHERE {where} "
            f"ORDER BY {qn(column)} LIMIT 1)"
        )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(heads)}")
        row = cursor.fetchone()
    return {d[0]: at for d, at in zip(_DEADLINES, row, strict=True) if at is not None}


def next_due() -> int | None:
    """The earliest deadline of any step, or None."""
    return min(due_heads().values(), default=None)


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


def run_due(now: int, limit: int, steps: Sequence[Step] = STEPS) -> int:
    """Run the internal steps (all, or ``steps``) until none finds a full batch; returns the rows
    processed."""
    # One trace per tick: its steps, and their queries, are children rather than traces each.
    with _tracer.start_as_current_span("resonate tick") as span:
        total = _run_steps(now, limit, steps)
        span.set_attribute("resonate.rows", total)
        return total


def run_deadlines(now: int, limit: int) -> int:
    """Run just the steps whose earliest deadline has come (a pass woken by a deadline: the frame
    a timer's awaiter waits for is not held up behind steps with nothing to do)."""
    heads = due_heads()
    steps = [step for step in STEPS if heads.get(step, now + 1) <= now]
    return run_due(now, limit, steps) if steps else 0


def _run_steps(now: int, limit: int, steps: Sequence[Step]) -> int:
    total = 0
    for step in steps:
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
