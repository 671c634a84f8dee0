"""The internal steps (spec §5): R1 promise timeout, R7 schedule fire, R5 lease expiry, R6 retry
dispatch, R3 listener drain, R4 callback drain, and the runner that drives them.

Each step is ``(now, limit) -> count``: one unit of work claiming at most ``limit`` due rows with
``SKIP LOCKED`` (so concurrent sweepers never process the same row), re-checking every guard ("an
armed timer means not before").

One row never stops the others (docs/explanation/time-and-steps.md#poison-rows): when a step's
batch raises for anything but the database being unavailable, the runner goes through that batch
again one row per transaction, and a row that raises on its own is *set aside* (an
``outbox.Quarantine`` entry, logged, shown in the admin with its error) while the others, and the
steps after it, run. A step skips its set-aside rows while their due time is unchanged (as does
``due_heads``, so the runner does not wake for them); deleting the entry, or a new due time, lets
the step try the row again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Exists, Model, OuterRef, Q, TextField
from django.db.models.functions import Cast
from opentelemetry import trace

from outbox.models import Quarantine
from promises.models import Callback, Listener, Promise, PromiseState
from resonate_project.core import cron
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import promise_record
from resonate_project.core.schedules import expand
from resonate_project.core.tags import BRANCH, SCHEDULE
from resonate_project.core.wire.promises import PromiseCreateReq, Value, later
from resonate_project.engine import outbox, promise_transitions, rows, task_transitions, wake
from resonate_project.engine.effects import Effects
from resonate_project.engine.locks import due_tasks_for_update
from resonate_project.engine.uow import unit_of_work
from resonate_project.observability import metrics
from schedules.models import Schedule
from tasks_app.models import Task, TaskState

log = logging.getLogger("resonate.steps")

# The database itself failing (unreachable, restarting, a deadlock): the pass is retried whole,
# and no row is set aside for it.
UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError)


def promise_timeouts(now: int, limit: int, only: Any = None) -> int:
    """R1: settle external promises whose deadline has passed (C1: only external ones are armed;
    an internal promise's deadline is projection only). ``only``: just this row, if due (each
    step takes it: the runner's pass over a failed batch, one row at a time)."""
    with unit_of_work(now, steps=True) as fx:
        if only is None:
            due = rows.due(Promise, _armed_spared(connection.vendor), "timeout_at", now, limit)
        else:
            due = [
                p
                for p in rows.by_ids(Promise, [only], for_update=True)
                if p.external and p.state == PromiseState.PENDING and p.timeout_at <= now
            ]
        deadlines = [p.timeout_at for p in due]
        for p in due:
            promise_transitions.time_out(p, fx)
    metrics.record_lag("promise_timeouts", now, deadlines)
    return len(due)


def listener_drain(now: int, limit: int, only: Any = None) -> int:
    """R3 for listeners left ready by a settlement made while the steps were paused."""
    with unit_of_work(now, steps=True):
        found = list(
            Listener.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("awaited")
            .filter(_one(only), _spared("listener_drain", None), ready=True)[:limit]
        )
        records = {r.awaited_id: promise_record(r.awaited, now) for r in found}
        triples = [(r.id, r.awaited_id, r.address) for r in found]
        return promise_transitions.unblock_listeners(triples, records, now)


def callback_drain(now: int, limit: int, only: Any = None) -> int:
    """R4 for callbacks left ready (the awaiter was busy at settlement, or the steps were
    paused): resume each awaiter, with the deadline guard of C6."""
    with unit_of_work(now, steps=True) as fx:
        found = list(
            Callback.objects.select_for_update(skip_locked=True)
            .filter(_one(only), _spared("callback_drain", None), ready=True)
            .values_list("id", "awaited_id", "awaiter_id")[:limit]
        )
        busy = promise_transitions.resume_callbacks(found, now, fx)
        return len(found) - len(busy)


def schedule_fire(now: int, limit: int, only: Any = None) -> int:
    """R7: create every occurrence due in ``[nextRunAt, now]``, each as if at its own instant, up
    to ``SCHEDULE_CATCHUP_BATCH`` per schedule per call; returns the occurrences fired."""
    per_schedule = resonate_settings().SCHEDULE_CATCHUP_BATCH
    fired = 0
    instants: list[int] = []
    with unit_of_work(now, steps=True) as fx:
        due = list(
            Schedule.objects.select_for_update(skip_locked=True)
            .filter(_one(only), _spared("schedule_fire", "next_run_at"), next_run_at__lte=now)
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
    promise_transitions.create_with_task(req, instant, fx)
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


def lease_expiry(now: int, limit: int, only: Any = None) -> int:
    """R5: an acquired task whose lease passed goes back to pending (same version) and is
    dispatched again. If its promise is dead it is not re-pended (C5): its timeout is applied
    instead, which fulfils it."""
    with unit_of_work(now, steps=True) as fx:
        spared = _spared("lease_expiry", "task__expires_at")
        due = due_tasks_for_update(TaskState.ACQUIRED, "expires_at", now, limit, _one(only), spared)
        deadlines = [task.expires_at or now for task, _ in due]  # before they change
        for task, p in due:
            if promise_transitions.live_or_time_out(p, now, fx):
                task_transitions.make_pending(task, p, now, fx)
    metrics.record_lag("lease_expiry", now, deadlines)
    return len(due)


def retry_dispatch(now: int, limit: int, only: Any = None) -> int:
    """R6: a pending task nobody acquired is offered again every RETRY_TIMEOUT_MS. No dispatch for
    the dead (C5): a task whose promise is dead gets its timeout applied instead."""
    with unit_of_work(now, steps=True) as fx:
        spared = _spared("retry_dispatch", "task__retry_at")
        due = due_tasks_for_update(TaskState.PENDING, "retry_at", now, limit, _one(only), spared)
        deadlines = [task.retry_at or now for task, _ in due]  # before they change
        for task, p in due:
            if promise_transitions.live_or_time_out(p, now, fx):
                task_transitions.dispatch(task, p, now)
    metrics.record_lag("retry_dispatch", now, deadlines)
    return len(due)


def outbox_cleanup(now: int, limit: int, only: Any = None) -> int:
    """Not in the spec (delivery is the environment's there), every tick, no deadline of its
    own: due executes no worker could act on are deleted (``engine.outbox.drop_stale_executes``)
    and unicast poll messages whose stream has been away ``UNDELIVERABLE_AFTER_MS`` leave the
    due set (``engine.outbox.set_aside_undeliverable``). Returns the larger count, so a full
    batch of either runs the step again."""
    if only is not None:
        return 0
    stale = outbox.drop_stale_executes(now, limit)
    return max(stale, outbox.set_aside_undeliverable(now, limit))


# Per step with a deadline: the table, its column, the partial index the step sweeps and the
# query's condition, which implies that index's (SQLite reads a partial index only for a query
# whose terms include each of the index's own).


def index_condition(model: type[Model], name: str) -> str:
    """The ``WHERE`` condition of ``model``'s partial index ``name`` as this connection's Django
    renders it in the migration (``Index.create_sql``), so a sweep's query names the same terms as
    the index it means to read."""
    index = next(i for i in model._meta.indexes if i.name == name)
    sql = str(index.create_sql(model, connection.schema_editor()))
    return sql.partition(" WHERE ")[2].strip()


def _armed(vendor: str) -> str:
    """The condition of ``promise_armed_timeout`` (the model's ``Q(state="pending",
    external=True)``) as the sweep and ``due_heads`` write it: on PostgreSQL the index's own
    rendering (:func:`index_condition`). On SQLite the same terms twice over, since a database
    keeps the rendering it was migrated under whichever Django serves it: ``"external"`` (6.0)
    and ``"external" = 1`` (6.1); and ``state = 'pending'`` declared likely, since without
    statistics the planner takes it for selective, reads ``promise_state_id`` and sorts every
    pending promise. Nothing here names the index (``INDEXED BY`` fails every query whose
    condition does not match the index verbatim): a rendering missed costs a sort, never an
    error (tests/embedding reads the plans under either rendering, on 6.0 and 6.1;
    tests/engine/test_steps.py checks the SQLite terms against the model's index)."""
    if vendor == "sqlite":
        return '"external" AND "external" = 1 AND likelihood("state" = \'pending\', 0.9)'
    return index_condition(Promise, "promise_armed_timeout")


def _spared_sql(step: str, model: type[Any], column: str) -> str:
    """SQL: the row of ``model`` is not set aside by ``step`` at its current ``column``."""
    table = f'"{model._meta.db_table}"'
    return (
        f'NOT EXISTS (SELECT 1 FROM "{Quarantine._meta.db_table}" q WHERE q."step" = \'{step}\' '
        f'AND q."row" = {table}."id" AND q."due_at" = {table}."{column}")'
    )


def _armed_spared(vendor: str) -> str:
    return f"{_armed(vendor)} AND {_spared_sql('promise_timeouts', Promise, 'timeout_at')}"


_DEADLINES: tuple[
    tuple[Callable[[int, int], int], type[Any], str, str, str | Callable[[str], str]], ...
] = (
    (promise_timeouts, Promise, "timeout_at", "promise_armed_timeout", _armed_spared),
    (
        schedule_fire,
        Schedule,
        "next_run_at",
        "schedule_due",
        _spared_sql("schedule_fire", Schedule, "next_run_at"),
    ),
    (
        lease_expiry,
        Task,
        "expires_at",
        "task_due_lease",
        "\"state\" = 'acquired' AND " + _spared_sql("lease_expiry", Task, "expires_at"),
    ),
    (
        retry_dispatch,
        Task,
        "retry_at",
        "task_due_retry",
        "\"state\" = 'pending' AND " + _spared_sql("retry_dispatch", Task, "retry_at"),
    ),
)


def due_head_statements(vendor: str) -> list[str]:
    """Per step with deadlines, the ``ORDER BY … LIMIT 1`` query reading the first entry of the
    partial index it sweeps (``_DEADLINES``)."""
    qn = connection.ops.quote_name
    heads = []
    for _, model, column, _index, condition in _DEADLINES:
        cond = condition(vendor) if callable(condition) else condition
        where = " AND ".join(c for c in (cond, f"{qn(column)} IS NOT NULL") if c)
        heads.append(
            f"SELECT {qn(column)} FROM {qn(model._meta.db_table)} WHERE {where} "
            f"ORDER BY {qn(column)} LIMIT 1"
        )
    return heads


def due_heads() -> dict[Callable[[int, int], int], int]:
    """The earliest deadline each step with deadlines waits for (R1 timeout, R7 next run, R5 lease
    expiry, R6 retry); a step with none is absent. One statement of four subqueries
    (``due_head_statements``), each one index probe whatever the table sizes. The drains (R3, R4)
    have no deadline: their rows are ready at once, and run inline."""
    heads = due_head_statements(connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join(f'({head})' for head in heads)}")
        row = cursor.fetchone()
    return {d[0]: at for d, at in zip(_DEADLINES, row, strict=True) if at is not None}


def next_due() -> int | None:
    """The earliest deadline of any step, or None."""
    return min(due_heads().values(), default=None)


class Step(Protocol):
    __name__: str

    def __call__(self, now: int, limit: int, only: Any = None) -> int: ...


STEPS: tuple[Step, ...] = (
    promise_timeouts,
    schedule_fire,
    lease_expiry,
    retry_dispatch,
    listener_drain,
    callback_drain,
    outbox_cleanup,
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
                try:
                    n = step(now, limit)
                except UNAVAILABLE:
                    raise
                except Exception:
                    log.exception(
                        "step %s failed; going through its rows one by one", step.__name__
                    )
                    n = _one_by_one(step, now, limit)
                span.set_attribute("resonate.rows", n)
            metrics.record_step(step.__name__, n, time.perf_counter() - started)
            total += n
            if n < limit:
                break
    return total


# --- rows set aside -------------------------------------------------------------------------------


def _one(only: Any) -> Q:
    return Q() if only is None else Q(pk=only)


def _spared(step: str, due: str | None) -> Any:
    """The queryset filter: the row is not set aside by ``step`` (at its current ``due``)."""
    entries = Quarantine.objects.filter(step=step, row=Cast(OuterRef("pk"), TextField()))
    if due is not None:
        entries = entries.filter(due_at=OuterRef(due))
    return ~Exists(entries)


# What each step sweeps, for going through a failed batch: the model, the rows' condition, the
# due column (None: a drain, whose rows are ready at once).
_ROWS: dict[str, tuple[type[Model], Q, str | None]] = {
    "promise_timeouts": (Promise, Q(external=True, state=PromiseState.PENDING), "timeout_at"),
    "schedule_fire": (Schedule, Q(), "next_run_at"),
    "lease_expiry": (Task, Q(state=TaskState.ACQUIRED), "expires_at"),
    "retry_dispatch": (Task, Q(state=TaskState.PENDING), "retry_at"),
    "listener_drain": (Listener, Q(ready=True), None),
    "callback_drain": (Callback, Q(ready=True), None),
}


def _candidates(step: str, now: int, limit: int) -> list[tuple[Any, int | None]]:
    """The rows ``step``'s batch would take, (key, due time), soonest first, without decoding
    them (a row that does not decode is one to find)."""
    if step not in _ROWS:
        return []
    model, where, due = _ROWS[step]
    qs = model._default_manager.filter(where, _spared(step, due))
    if due is None:
        return [(pk, None) for pk in qs.order_by("pk").values_list("pk", flat=True)[:limit]]
    found = qs.filter(**{f"{due}__lte": now}).order_by(due).values_list("pk", due)[:limit]
    return [(pk, at) for pk, at in found]


def _one_by_one(step: Step, now: int, limit: int) -> int:
    """The rows of a batch that raised, each in its own transaction: a row that raises alone is
    set aside, the others are processed. Returns the rows gone through."""
    name = step.__name__
    found = _candidates(name, now, limit)
    for pk, due_at in found:
        try:
            step(now, 1, only=pk)
        except UNAVAILABLE:
            raise
        except Exception as exc:
            log.exception("step %s: row %s set aside", name, pk)
            set_aside(name, pk, due_at, now, exc)
    return len(found)


def set_aside(step: str, pk: Any, due_at: int | None, now: int, exc: BaseException) -> None:
    """Record the row ``step`` could not process, for operators; it skips it from now on (while
    its due time is ``due_at``)."""
    error = f"{type(exc).__name__}: {exc}"[:2000].replace("\x00", "\\x00")
    with transaction.atomic():
        Quarantine.objects.update_or_create(
            step=step, row=str(pk), defaults={"due_at": due_at, "error": error, "at": now}
        )
