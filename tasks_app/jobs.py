"""Calls enqueued through Django's Tasks framework, on durable promises
(docs/how-to/django-tasks.md): enqueue, claim, the outcome of an attempt, cancel and re-run, and
the view ``TaskResult`` is built from. Keyword-only, ``now`` (ms) passed in.

Every protocol change is one of the engine's transitions (``engine.promise_transitions``,
``engine.task_transitions``), behind the same fence checks as the protocol's handlers
(``tasks_app.handlers.check_fence``), or goes through the typed services (``promises.services``,
``tasks_app.services``) on the rarer paths; this module adds the ``Job`` row's bookkeeping in the
same transaction, so an attempt fenced out by a newer holder (``Conflict``) records nothing. The
worker's hot path is written for many jobs at once: enqueue is one round trip, a claim one
statement to pick and one round trip to acquire, and outcomes are recorded in batches.

Lock order: job rows before their promises (and a task after its promise), each kind in id
order; the claim takes all three with ``SKIP LOCKED``, so it never waits.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.db import connection, transaction

from promises import services as promises
from promises.models import Promise
from resonate_project.core.addresses import database_target
from resonate_project.core.errors import NotFound, ProtocolError
from resonate_project.core.protocol import PENDING, is_live, projected_state, viewed_task_state
from resonate_project.core.tags import DELAY, TARGET
from resonate_project.core.wire import checked
from resonate_project.core.wire.promises import PromiseCreateReq, Value, later
from resonate_project.engine import promise_transitions, rows, task_transitions, wake
from resonate_project.engine.uow import unit_of_work
from tasks_app import services as tasks
from tasks_app.handlers import check_fence
from tasks_app.models import Job, Task, TaskState

# The tag naming the function, so promise.search (and the SDKs, the CLI) can find these calls.
FUNCTION_TAG = "django.tasks:function"


class TaskCanceled(Exception):
    """The call was canceled (its promise settled ``rejected_canceled``) before it finished."""


class TaskTimedOut(Exception):
    """The call's promise reached its deadline before an attempt succeeded."""


class WorkerLost(Exception):
    """An attempt's worker stopped heartbeating before it reported (killed, or frozen past its
    lease); the attempt counts, and the call runs again if attempts remain."""


def class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True, slots=True)
class Call:
    """The promise's param: which function (``module.qualname``) with which JSON arguments."""

    path: str
    args: list[Any]
    kwargs: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        return {"function": self.path, "args": self.args, "kwargs": self.kwargs}


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as ``TaskResult`` reports it, at ``now``. ``version`` is the task's: for a claimed
    job, the attempt's fencing token."""

    id: str
    backend: str
    queue: str
    priority: int
    call: Call
    due_at: int
    enqueued_at: int
    started_at: int | None
    last_attempted_at: int | None
    finished_at: int | None
    promise_state: str
    task_state: str
    version: int
    worker_ids: list[str] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    value: Any = None


def encode_json(value: Any) -> dict[str, Any]:
    """A value as the SDKs store one: base64 of its JSON (``resonate.get`` decodes it)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return {"data": base64.b64encode(text.encode()).decode()}


def decode_json(data: str | None) -> Any:
    if not data:
        return None
    return json.loads(base64.b64decode(data))


def error_value(error: dict[str, str]) -> dict[str, Any]:
    """A rejection as the Python SDK reads one (``__type: error`` with a ``message``), plus the
    exception's class path and traceback."""
    return encode_json({"__type": "error", **error})


def task_error(cls: type, message: str, traceback: str) -> dict[str, str]:
    return {"exception_class_path": class_path(cls), "message": message, "traceback": traceback}


def backoff(job: Job, failures: int) -> int:
    return int(min(job.backoff_ms * 2 ** max(failures - 1, 0), job.backoff_max_ms))


# --- enqueue --------------------------------------------------------------------------------


def job_enqueue(
    *,
    id: str,
    backend: str,
    queue: str,
    call: Call,
    priority: int,
    due_at: int,
    timeout_at: int,
    max_attempts: int,
    backoff_ms: int,
    backoff_max_ms: int,
    now: int,
) -> None:
    """A promise ``id`` whose param is ``call``, targeted at ``django-tasks://backend/queue``
    (its task is claimed from the database, so no message is written), and its job row.

    P-02's birth of a targeted promise through the engine's transitions (the promise, its task
    born pending with its retry timer parked at the deadline, as ``first_dispatch_at`` says for
    a task claimed from the database), plus the job: three inserts in one round trip on
    PostgreSQL. Inside the caller's ``transaction.atomic()`` they commit or roll back with the
    caller's rows; like Django's own ``save()``, a failure among them marks the caller's
    transaction for rollback rather than costing a savepoint on every call."""
    tags = {TARGET: database_target(backend, queue), FUNCTION_TAG: call.path}
    if due_at > now:
        tags[DELAY] = str(due_at)  # the protocol's delayed dispatch, for readers of the tags
    req = checked(
        PromiseCreateReq,
        id=id,
        timeoutAt=timeout_at,
        param=encode_json(call.as_json()),
        tags=tags,
    )
    p = promise_transitions.new_promise(req, now)
    task = Task(promise=p, state=TaskState.PENDING, version=0)
    task.retry_at = task_transitions.first_dispatch_at(p, now)
    job = Job(
        task=task,
        backend=backend,
        queue=queue,
        function=call.path,
        priority=priority,
        due_at=max(due_at, now),
        max_attempts=max_attempts,
        backoff_ms=backoff_ms,
        backoff_max_ms=backoff_max_ms,
        enqueued_at=now,
    )
    with transaction.atomic(savepoint=False):
        rows.each([rows.insert_statement(obj) for obj in (p, task, job)])
        if p.external:  # R1 arms its deadline (C1)
            wake.deadline(p.timeout_at, now)
    for obj in (p, task, job):
        rows.inserted(obj)


# --- the worker's side ------------------------------------------------------------------------


def job_claim(
    *, backend: str, queues: list[str], pid: str, ttl: int, now: int, limit: int
) -> list[JobView]:
    """Acquire up to ``limit`` due jobs of these queues for worker ``pid`` (lease ``ttl`` ms),
    highest priority first, then oldest due.

    One statement picks the jobs with their tasks and promises, ``FOR UPDATE OF`` all three
    ``SKIP LOCKED`` (on SQLite the IMMEDIATE transaction serialises claims), so concurrent
    workers never pick the same rows and the claim never waits on a lock. It walks only
    unfinished jobs (a partial index in claim order) and passes over those whose task is held
    under a live lease or halted, testing each joined task row rather than anti-joining the whole
    task table. The jobs that are plainly ready (task pending, promise live, no attempt in
    progress) are acquired together: one ``UPDATE`` of their tasks (T-03's transition: version up
    by one, the lease) and one of their jobs; on PostgreSQL the pick and both updates are one
    statement (``_pick_and_acquire``, a writable CTE). The rest take the one-by-one path
    (:func:`_start`): a task whose lease has lapsed is taken back first (R5, via
    ``expire_lease``) and its unreported attempt recorded as a ``WorkerLost`` error; a job whose
    attempts are spent that way is failed instead of run; a job whose promise was settled
    elsewhere (its deadline, ``promise.settle``) is marked finished when first met.
    """
    claimed = []
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # The pick and the acquisition of the ready jobs are one statement (a writable CTE).
            others, acquired = _pick_and_acquire(backend, queues, pid, ttl, now, limit)
            claimed.extend(acquired)
        else:
            ready, others = [], []
            for job, task_state, version, live, param in _pick(backend, queues, now, limit):
                if _ready(job, task_state, live):
                    ready.append((job, version, param))
                else:
                    others.append(job)
            if ready:
                claimed.extend(_acquire_ready(ready, pid, ttl, now))
        for job in others:
            view = _start(job, pid, ttl, now)
            if view is not None:
                claimed.append(view)
    return claimed


@cache
def _pick_sql(vendor: str, queues: int) -> str:
    """The claim's pick: every job column, then the task's state and version, whether the
    promise is live (at the first parameter) and the promise's param; ``_pick_and_acquire_sql``
    names those four (``_t_state``, ``_t_version``, ``_live``, ``_param``)."""
    quote = connection.ops.quote_name
    job_columns = ", ".join(f"j.{quote(str(f.column))}" for f in Job._meta.concrete_fields)
    lock = " FOR UPDATE OF j, t, p SKIP LOCKED" if vendor == "postgresql" else ""
    marks = ", ".join(["%s"] * queues)
    return (
        f"SELECT {job_columns}, t.state AS _t_state, t.version AS _t_version, "
        "p.state = 'pending' AND p.timeout_at > %s AS _live, p.param_data AS _param "
        f"FROM {quote(Job._meta.db_table)} j "
        f"JOIN {quote(Task._meta.db_table)} t ON t.id = j.id "
        f"JOIN {quote(Promise._meta.db_table)} p ON p.id = j.id "
        f"WHERE NOT j.finished AND j.backend = %s AND j.queue IN ({marks}) AND j.due_at <= %s "
        "AND t.state <> 'halted' AND NOT (t.state = 'acquired' AND t.expires_at > %s) "
        f"ORDER BY j.priority DESC, j.due_at, j.id LIMIT %s{lock}"
    )


def _pick(
    backend: str, queues: list[str], now: int, limit: int
) -> list[tuple[Job, str, int, bool, str | None]]:
    """The claim's one statement: due, unfinished jobs whose task is not busy, locked with their
    task and promise rows; each with its task's state and version, whether its promise is live,
    and the call (the promise's param)."""
    sql = _pick_sql(connection.vendor, len(queues))
    with connection.cursor() as cursor:
        cursor.execute(sql, [now, backend, *queues, now, now, limit])
        found = cursor.fetchall()
    width = len(Job._meta.concrete_fields)
    jobs = rows.build(Job, [row[:width] for row in found])
    return [
        (job, row[width], row[width + 1], bool(row[width + 2]), row[width + 3])
        for job, row in zip(jobs, found, strict=True)
    ]


def _ready(job: Job, task_state: str, promise_live: bool) -> bool:
    """Plainly ready: no attempt in progress, attempts left, the task pending, the promise live
    (``_READY`` says the same in SQL)."""
    plain = job.running is None and len(job.errors) < job.max_attempts
    return plain and task_state == TaskState.PENDING and promise_live


_READY = (
    "running IS NULL AND jsonb_array_length(errors) < max_attempts "
    "AND _t_state = 'pending' AND _live"
)


@cache
def _pick_and_acquire_sql(queues: int) -> str:
    """PostgreSQL: ``_pick_sql`` as a CTE, then the ready jobs' task acquisition
    (``_ACQUIRE_SET``, as ``_acquire_statement``) and their running mark, in one statement;
    each picked row comes back with whether it was acquired."""
    quote = connection.ops.quote_name
    task, job = quote(Task._meta.db_table), quote(Job._meta.db_table)
    names = ", ".join(quote(str(f.column)) for f in Job._meta.concrete_fields)
    return (
        f"WITH picked AS ({_pick_sql('postgresql', queues)}), "
        f"ready AS (SELECT id FROM picked WHERE {_READY}), "
        f"acquired AS (UPDATE {task} t SET {_ACQUIRE_SET} "
        "FROM ready WHERE t.id = ready.id RETURNING t.id, t.version), "
        f"marked AS (UPDATE {job} j SET running = a.version, "
        "worker_ids = j.worker_ids || jsonb_build_array(%s::text), "
        "started_at = COALESCE(j.started_at, %s), last_attempted_at = %s "
        "FROM acquired a WHERE j.id = a.id RETURNING j.id) "
        f"SELECT {names}, _t_version, _param, id IN (SELECT id FROM marked) FROM picked"
    )


def _pick_and_acquire(
    backend: str, queues: list[str], pid: str, ttl: int, now: int, limit: int
) -> tuple[list[Job], list[JobView]]:
    """``_pick`` and ``_acquire_ready`` in one statement on PostgreSQL: the jobs left for the
    one-by-one path, and the views of those acquired."""
    expires_at = later(now, ttl)
    params: list[Any] = [now, backend, *queues, now, now, limit, pid, ttl, expires_at, pid]
    params += [pid, now, now]
    with connection.cursor() as cursor:
        cursor.execute(_pick_and_acquire_sql(len(queues)), params)
        found = cursor.fetchall()
    width = len(Job._meta.concrete_fields)
    jobs = rows.build(Job, [row[:width] for row in found])
    others, views = [], []
    for job, row in zip(jobs, found, strict=True):
        version, param, acquired = row[width : width + 3]
        if acquired:
            views.append(_acquired(job, version, param, pid, now))
        else:
            others.append(job)
    if views:
        wake.deadline(expires_at, now)
    return others, views


def _acquire_ready(
    ready: list[tuple[Job, int, str | None]], pid: str, ttl: int, now: int
) -> list[JobView]:
    """T-03 for jobs whose pending task and live promise the claim holds locked (SQLite:
    PostgreSQL acquires them in the pick, ``_pick_and_acquire``): their tasks acquired by
    ``pid`` in one statement (each version up by one), their jobs marked running in a second."""
    ids = [job.task_id for job, _, _ in ready]
    expires_at = later(now, ttl)
    rows.each([_acquire_statement(ids, pid, ttl, expires_at), _running_statement(ids, pid, now)])
    wake.deadline(expires_at, now)
    return [_acquired(job, version, param, pid, now) for job, version, param in ready]


def _acquired(job: Job, version: int, param: str | None, pid: str, now: int) -> JobView:
    """The view of ``job`` whose task (at ``version`` before) ``pid`` has just acquired, the job
    as the running mark left it."""
    job.running = version + 1
    job.worker_ids = [*job.worker_ids, pid]
    job.started_at = job.started_at if job.started_at is not None else now
    job.last_attempted_at = now
    return _view(job, _call(param), PENDING, TaskState.ACQUIRED, version + 1, None, None)


# T-03 for a task the claim holds: version up by one, the lease (pid, ttl, expires_at, last_pid).
_ACQUIRE_SET = (
    "state = 'acquired', version = version + 1, pid = %s, ttl = %s, expires_at = %s, "
    "last_pid = %s, retry_at = NULL, resumes = '[]'"
)


def _acquire_statement(
    ids: list[str], pid: str, ttl: int, expires_at: int
) -> tuple[str, list[Any]]:
    quote = connection.ops.quote_name
    marks = ", ".join(["%s"] * len(ids))
    return (
        f"UPDATE {quote(Task._meta.db_table)} SET {_ACQUIRE_SET} WHERE id IN ({marks})",
        [pid, ttl, expires_at, pid, *ids],
    )


def _running_statement(ids: list[str], pid: str, now: int) -> tuple[str, list[Any]]:
    """Each job runs its task's new version; the worker joins its history (SQLite: PostgreSQL
    marks them in ``_pick_and_acquire_sql``)."""
    quote = connection.ops.quote_name
    marks = ", ".join(["%s"] * len(ids))
    task, job = quote(Task._meta.db_table), quote(Job._meta.db_table)
    return (
        f"UPDATE {job} SET running = (SELECT t.version FROM {task} t WHERE t.id = {job}.id), "
        "worker_ids = json_insert(worker_ids, '$[#]', %s), started_at = COALESCE(started_at, %s), "
        f"last_attempted_at = %s WHERE id IN ({marks})",
        [pid, now, now, *ids],
    )


_START_FIELDS = ["errors", "running", "worker_ids", "started_at", "last_attempted_at", "finished"]


def _start(job: Job, pid: str, ttl: int, now: int) -> JobView | None:
    id = job.task_id
    # Read in a statement after the job lock, so the latest committed state (see
    # resonate_project/engine/locks.py for why a joined read would not do).
    task = Task.objects.select_related("promise").get(pk=id)
    if task.state == TaskState.FULFILLED or not is_live(task.promise, now):
        job.finished, job.running = True, None
        job.save(update_fields=_START_FIELDS)
        return None
    held = task.state == TaskState.ACQUIRED and (task.expires_at or 0) > now
    if held or task.state not in (TaskState.PENDING, TaskState.ACQUIRED):
        return None
    try:
        if task.state == TaskState.ACQUIRED:  # its lease has lapsed: R5 for this task
            tasks.expire_lease(id=id, now=now)
        if job.running is not None:
            lost = job.worker_ids[-1] if job.worker_ids else "?"
            job.errors = [
                *job.errors,
                task_error(
                    WorkerLost,
                    f"worker {lost} stopped heartbeating during attempt {len(job.worker_ids)}",
                    "",
                ),
            ]
            job.running = None
        claim = tasks.task_acquire(id=id, version=task.version, pid=pid, ttl=ttl, now=now)
    except ProtocolError:  # changed meanwhile: not ours to run now
        job.save(update_fields=_START_FIELDS)
        return None
    version = claim["task"]["version"]
    if len(job.errors) >= job.max_attempts:
        tasks.task_fulfill(
            id=id, version=version, state="rejected", value=error_value(job.errors[-1]), now=now
        )
        job.finished = True
        job.save(update_fields=_START_FIELDS)
        return None
    job.running = version
    job.worker_ids = [*job.worker_ids, pid]
    job.started_at = job.started_at if job.started_at is not None else now
    job.last_attempted_at = now
    job.save(update_fields=_START_FIELDS)
    param = claim["promise"]["param"]
    return _view(job, _call(param.get("data")), PENDING, TaskState.ACQUIRED, version, None, None)


def _job_for_update(id: str) -> Job:
    job = Job.objects.select_for_update().filter(task_id=id).first()
    if job is None:
        raise NotFound("job not found")
    return job


# What an attempt's report did (``job_report``).
SUCCEEDED, RETRYING, FAILED = "succeeded", "retrying", "failed"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What attempt ``version`` of job ``id`` came to: ``value`` (JSON) if it returned, else
    ``error`` (``task_error``'s fields)."""

    id: str
    version: int
    value: Any = None
    error: dict[str, str] | None = None


def job_report(*, outcomes: Sequence[Outcome], now: int) -> dict[str, str | ProtocolError]:
    """Record these attempts' outcomes in one transaction. A returned attempt resolves its
    promise with the value (``SUCCEEDED``); a failed one with attempts left releases its task,
    due again after the backoff (``RETRYING``), else rejects the promise with the error
    (``FAILED``). An attempt that no longer holds its task (its lease lapsed and another took
    over, or the call was canceled) gets its refusal (``Conflict``, or ``NotFound``) and records
    nothing; the others are not affected.

    Lock order: the job rows, then their promises (each with its task), all in id order, taken
    in one round trip on PostgreSQL; the settlements' steps (listeners, callbacks) run once for
    the whole batch as the unit of work closes.
    """
    ids = sorted({o.id for o in outcomes})
    done: dict[str, str | ProtocolError] = {}
    with unit_of_work(now) as fx:
        locked_jobs, locked_promises, read_tasks = rows.each(
            [_jobs_for_update(ids), *rows.locked_with_statements(Promise, ids, Task)]
        )
        jobs = {j.task_id: j for j in rows.build(Job, locked_jobs)}
        found = {t.pk: t for t in rows.build(Task, read_tasks)}
        promises_by_id = {p.id: p for p in rows.build(Promise, locked_promises)}
        writes: list[tuple[str, list[Any]]] = []
        for o in outcomes:
            job, t, p = jobs.get(o.id), found.get(o.id), promises_by_id.get(o.id)
            if job is None or t is None or p is None or o.id in done:
                done.setdefault(o.id, NotFound("job not found"))
                continue
            try:
                check_fence(t, p, o.version, now)
            except ProtocolError as refused:
                done[o.id] = refused
                continue
            job.running = None
            if o.error is None:
                value = Value(data=encode_json(o.value)["data"])
                with rows.deferred(writes):  # the promise and task rows go with the job rows
                    promise_transitions.settle(p, "resolved", value, now, fx, task=t)
                job.finished = True
                done[o.id] = SUCCEEDED
            else:
                job.errors = [*job.errors, o.error]
                if len(job.errors) < job.max_attempts:
                    task_transitions.release(t, p, now, fx)
                    job.due_at = now + backoff(job, len(job.errors))
                    done[o.id] = RETRYING
                else:
                    value = Value(data=error_value(o.error)["data"])
                    with rows.deferred(writes):
                        promise_transitions.settle(p, "rejected", value, now, fx, task=t)
                    job.finished = True
                    done[o.id] = FAILED
            writes.append(rows.update_statement(job, ["errors", "running", "due_at", "finished"]))
        if writes:
            rows.each(writes)
    return done


def _jobs_for_update(ids: list[str]) -> tuple[str, list[Any]]:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(str(f.column)) for f in Job._meta.concrete_fields)
    marks = ", ".join(["%s"] * len(ids))
    lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
    return (
        f"SELECT {columns} FROM {quote(Job._meta.db_table)} WHERE id IN ({marks}) "
        f"ORDER BY id{lock}",
        list(ids),
    )


def _reported(outcome: str | ProtocolError) -> str:
    if isinstance(outcome, ProtocolError):
        raise outcome
    return outcome


def job_succeed(*, id: str, version: int, value: Any, now: int) -> None:
    """Attempt ``version`` returned ``value`` (JSON): resolve the promise with it. ``Conflict``
    (nothing recorded) if the attempt no longer holds the task."""
    _reported(job_report(outcomes=[Outcome(id, version, value=value)], now=now)[id])


def job_fail(*, id: str, version: int, error: dict[str, str], now: int) -> bool:
    """Attempt ``version`` raised ``error``. With attempts left the task is released and due
    again after the backoff (True); else the promise is rejected with the error (False).
    ``Conflict`` (nothing recorded) if the attempt no longer holds the task."""
    outcome = job_report(outcomes=[Outcome(id, version, error=error)], now=now)[id]
    return _reported(outcome) == RETRYING


def job_release(*, id: str, version: int, now: int) -> None:
    """A stopping worker gives attempt ``version`` back unfinished: the task is due again at
    once and the attempt is not counted (its worker id is dropped)."""
    with transaction.atomic():
        job = _job_for_update(id)
        tasks.task_release(id=id, version=version, now=now)
        job.running = None
        job.worker_ids = job.worker_ids[:-1]
        job.save(update_fields=["running", "worker_ids"])


# --- operators --------------------------------------------------------------------------------


def job_cancel(*, id: str, now: int) -> None:
    """Settle the call's promise ``rejected_canceled`` (a no-op once it is settled). A running
    attempt is not interrupted; its outcome is refused when it reports."""
    with transaction.atomic():
        job = _job_for_update(id)
        error = task_error(TaskCanceled, "canceled", "")
        promises.promise_settle(id=id, state="rejected_canceled", value=error_value(error), now=now)
        job.finished = True
        job.save(update_fields=["finished"])


def job_rerun(*, id: str, new_id: str, now: int) -> None:
    """Enqueue the same call again as ``new_id`` (a settled promise is final, so a re-run is a
    new result), with the original's queue, priority, retry policy and time to live."""
    job = Job.objects.select_related("task__promise").filter(task_id=id).first()
    if job is None:
        raise NotFound("job not found")
    p = job.task.promise
    job_enqueue(
        id=new_id,
        backend=job.backend,
        queue=job.queue,
        call=_call(p.param_data),
        priority=job.priority,
        due_at=now,
        timeout_at=now + (p.timeout_at - p.created_at),
        max_attempts=job.max_attempts,
        backoff_ms=job.backoff_ms,
        backoff_max_ms=job.backoff_max_ms,
        now=now,
    )


# --- reads ------------------------------------------------------------------------------------


def _call(data: str | None) -> Call:
    raw = decode_json(data) or {}
    return Call(str(raw.get("function", "")), list(raw.get("args", [])), raw.get("kwargs", {}))


def _view(
    job: Job,
    call: Call,
    promise_state: str,
    task_state: str,
    version: int,
    finished_at: int | None,
    value: Any,
) -> JobView:
    return JobView(
        id=job.task_id,
        backend=job.backend,
        queue=job.queue,
        priority=job.priority,
        call=call,
        due_at=job.due_at,
        enqueued_at=job.enqueued_at,
        started_at=job.started_at,
        last_attempted_at=job.last_attempted_at,
        finished_at=finished_at,
        promise_state=promise_state,
        task_state=task_state,
        version=version,
        worker_ids=list(job.worker_ids),
        errors=list(job.errors),
        value=value,
    )


def view_of(job: Job, task: Task, p: Promise, now: int) -> JobView:
    state, settled_at = projected_state(p, now)
    value = decode_json(p.value_data) if state != PENDING else None
    return _view(
        job,
        _call(p.param_data),
        state,
        viewed_task_state(task, p, now),
        task.version,
        settled_at,
        value,
    )


def job_view(*, id: str, now: int) -> JobView | None:
    """The job ``id`` at ``now`` (projected: past its deadline it reads as timed out)."""
    job = Job.objects.select_related("task__promise").filter(task_id=id).first()
    if job is None:
        return None
    return view_of(job, job.task, job.task.promise, now)
