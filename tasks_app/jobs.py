"""Calls enqueued through Django's Tasks framework, on durable promises
(docs/how-to/django-tasks.md): enqueue, claim, the outcome of an attempt, cancel and re-run, and
the view ``TaskResult`` is built from. Keyword-only, ``now`` (ms) passed in.

Every protocol change goes through the typed services (``promises.services``,
``tasks_app.services``), so the fences, the coupled promise/task writes and the outbox stay in
one place; this module adds only the ``Job`` row's bookkeeping, in the same transaction, so an
attempt fenced out by a newer holder (``Conflict``) records nothing.

Lock order: a job row before its promise (the services lock the promise).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q

from promises import services as promises
from promises.models import Promise
from resonate_project.core.addresses import database_target
from resonate_project.core.errors import NotFound, ProtocolError
from resonate_project.core.protocol import PENDING, is_live, projected_state, viewed_task_state
from resonate_project.core.tags import DELAY, TARGET
from tasks_app import services as tasks
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
    (its task is claimed from the database, so no message is written), and its job row. Inside
    the caller's ``transaction.atomic()`` both commit or roll back with the caller's rows."""
    tags = {TARGET: database_target(backend, queue), FUNCTION_TAG: call.path}
    if due_at > now:
        tags[DELAY] = str(due_at)  # the protocol's delayed dispatch, for readers of the tags
    with transaction.atomic():
        promises.promise_create(
            id=id, timeout_at=timeout_at, param=encode_json(call.as_json()), tags=tags, now=now
        )
        Job.objects.create(
            task_id=id,
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


# --- the worker's side ------------------------------------------------------------------------


def job_claim(
    *, backend: str, queues: list[str], pid: str, ttl: int, now: int, limit: int
) -> list[JobView]:
    """Acquire up to ``limit`` due jobs of these queues for worker ``pid`` (lease ``ttl`` ms),
    highest priority first, then oldest due.

    The job rows are claimed ``FOR UPDATE SKIP LOCKED`` and held while each task is acquired, in
    one transaction, so concurrent workers never pick the same rows (on SQLite the IMMEDIATE
    transaction serialises claims). The claim walks only unfinished jobs (a partial index in
    claim order) and skips those whose task is held under a live lease or halted. A task whose
    lease has lapsed is taken back first (R5, via ``expire_lease``) and its unreported attempt
    recorded as a ``WorkerLost`` error; a job whose attempts are spent that way is failed
    instead of run. A job whose promise was settled elsewhere (its deadline, ``promise.settle``)
    is marked finished when first met.
    """
    busy = Task.objects.filter(pk=OuterRef("pk")).filter(
        Q(state=TaskState.ACQUIRED, expires_at__gt=now) | Q(state=TaskState.HALTED)
    )
    claimed = []
    with transaction.atomic():
        rows = list(
            Job.objects.select_for_update(skip_locked=True)
            .filter(finished=False, backend=backend, queue__in=queues, due_at__lte=now)
            .exclude(Exists(busy))
            .order_by("-priority", "due_at", "task_id")[:limit]
        )
        for job in rows:
            view = _start(job, pid, ttl, now)
            if view is not None:
                claimed.append(view)
    return claimed


_START_FIELDS = ["errors", "running", "worker_ids", "started_at", "last_attempted_at", "finished"]


def _start(job: Job, pid: str, ttl: int, now: int) -> JobView | None:
    id = job.task_id
    # Read in a statement after the job lock, so the latest committed state: the claim's
    # ``busy`` test saw its own snapshot, and a worker that committed this job's claim while we
    # waited for the row has acquired the task since (resonate_project/engine/locks.py says why).
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


def job_succeed(*, id: str, version: int, value: Any, now: int) -> None:
    """Attempt ``version`` returned ``value`` (JSON): resolve the promise with it. ``Conflict``
    (nothing recorded) if the attempt no longer holds the task."""
    with transaction.atomic():
        job = _job_for_update(id)
        tasks.task_fulfill(
            id=id, version=version, state="resolved", value=encode_json(value), now=now
        )
        job.running, job.finished = None, True
        job.save(update_fields=["running", "finished"])


def job_fail(*, id: str, version: int, error: dict[str, str], now: int) -> bool:
    """Attempt ``version`` raised ``error``. With attempts left the task is released and due
    again after the backoff (True); else the promise is rejected with the error (False).
    ``Conflict`` (nothing recorded) if the attempt no longer holds the task."""
    with transaction.atomic():
        job = _job_for_update(id)
        job.errors = [*job.errors, error]
        job.running = None
        retry = len(job.errors) < job.max_attempts
        if retry:
            tasks.task_release(id=id, version=version, now=now)
            job.due_at = now + backoff(job, len(job.errors))
        else:
            tasks.task_fulfill(
                id=id, version=version, state="rejected", value=error_value(error), now=now
            )
            job.finished = True
        job.save(update_fields=["errors", "running", "due_at", "finished"])
        return retry


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
