"""Django's Tasks framework on durable promises (docs/how-to/django-tasks.md#how-it-maps).

``TASKS = {"default": {"BACKEND": "tasks_app.backends.ResonateBackend", ...}}``. ``enqueue``
writes, inside the caller's transaction, a promise whose id is the result id and whose param is
the call, with its task targeted at ``django-tasks://<alias>/<queue>``, plus the job row that
orders claims; ``manage.py resonate worker`` claims and runs it. ``get_result`` reads the
promise, the task and the job back as a ``TaskResult``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from django.core.checks import CheckMessage, Error
from django.db import transaction
from django.db.models import Q
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.module_loading import import_string

from resonate_project.core.clock import now_ms
from tasks_app import jobs
from tasks_app.models import TaskState

DAY_MS = 86_400_000

# OPTIONS and their defaults. TASK_OPTIONS overrides the retry policy per task module path:
# {"shop.tasks.charge": {"MAX_ATTEMPTS": 5}}. Django's @task() takes no retry arguments.
DEFAULTS: dict[str, Any] = {
    "MAX_ATTEMPTS": 3,  # attempts per call, lost workers included; 1 = never retried
    "RETRY_BACKOFF_MS": 1_000,  # delay before the first retry; doubles per failure
    "RETRY_BACKOFF_MAX_MS": 300_000,
    "TIMEOUT_MS": 30 * DAY_MS,  # the promise's deadline after run_after (then: timed out)
    "LEASE_MS": 30_000,  # the worker's lease; it heartbeats at half of it
    "POLL_INTERVAL_MS": 500,  # how often an idle worker looks for due calls
    "TASK_OPTIONS": {},
}
_PER_TASK = ("MAX_ATTEMPTS", "RETRY_BACKOFF_MS", "RETRY_BACKOFF_MAX_MS", "TIMEOUT_MS")


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def instant(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


def ms_at_or_after(moment: datetime) -> int:
    """The first whole millisecond not before `moment`: run_after means "not before", and the
    promise clock counts milliseconds, so a sub-millisecond run_after rounds up, never down."""
    aware = moment if moment.tzinfo is not None else moment.astimezone()  # naive: USE_TZ = False
    micros = (aware - EPOCH) // timedelta(microseconds=1)
    return -(-micros // 1000)


class ResonateBackend(BaseTaskBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    # Honoured within a queue: the worker's SKIP LOCKED claim orders by priority (job_claim).
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.settings = {**DEFAULTS, **self.options}

    def option(self, name: str, module_path: str | None = None) -> int:
        per_task: Mapping[str, Any] = self.settings["TASK_OPTIONS"].get(module_path or "", {})
        return int(per_task.get(name, self.settings[name]))

    @property
    def lease_ms(self) -> int:
        return self.option("LEASE_MS")

    @property
    def poll_interval_ms(self) -> int:
        return self.option("POLL_INTERVAL_MS")

    def worker_queues(self) -> list[str]:
        """The queues a worker serves by default: the configured ones, else ``default``."""
        return sorted(self.queues) or ["default"]

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        errors: list[CheckMessage] = []
        unknown = sorted(set(self.options) - set(DEFAULTS))
        if unknown:
            errors.append(
                Error(
                    f"TASKS[{self.alias!r}]['OPTIONS'] has unknown keys: {', '.join(unknown)}",
                    hint=f"known: {', '.join(DEFAULTS)}",
                    id="resonate.E040",
                )
            )
        overrides = self.settings["TASK_OPTIONS"]
        bad = not isinstance(overrides, Mapping) or any(
            not isinstance(v, Mapping) or set(v) - set(_PER_TASK) for v in overrides.values()
        )
        if bad:
            errors.append(
                Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['TASK_OPTIONS'] must map task module "
                    f"paths to dicts of {', '.join(_PER_TASK)}",
                    id="resonate.E041",
                )
            )
        return errors

    # --- enqueue --------------------------------------------------------------------------------

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Validate (``InvalidTask``; ``TypeError`` for arguments JSON cannot carry) before
        anything is written, then write the promise, task and job in the caller's transaction
        (one round trip; ``jobs.job_enqueue``). ``task_enqueued`` is sent once it commits."""
        self.validate_task(task)
        now = now_ms()
        result: TaskResult = TaskResult(
            task=task,
            id=str(uuid.uuid4()),
            status=TaskResultStatus.READY,
            enqueued_at=instant(now),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        due = now if task.run_after is None else max(ms_at_or_after(task.run_after), now)
        path = task.module_path
        jobs.job_enqueue(
            id=result.id,
            backend=self.alias,
            queue=task.queue_name,
            call=jobs.Call(path, result.args, result.kwargs),
            priority=task.priority,
            due_at=due,
            timeout_at=due + self.option("TIMEOUT_MS", path),
            max_attempts=max(1, self.option("MAX_ATTEMPTS", path)),
            backoff_ms=self.option("RETRY_BACKOFF_MS", path),
            backoff_max_ms=self.option("RETRY_BACKOFF_MAX_MS", path),
            now=now,
        )
        transaction.on_commit(partial(task_enqueued.send, type(self), task_result=result))
        return result

    # --- results --------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult:
        view = jobs.job_view(id=result_id, now=now_ms())
        if view is None or view.backend != self.alias:
            raise TaskResultDoesNotExist(result_id)
        return self.result_of(view)

    def task_of(self, view: jobs.JobView) -> Task:
        """The ``Task`` a job calls: the module-level ``@task`` object its path names."""
        found = import_string(view.call.path)
        if not isinstance(found, Task):
            raise InvalidTask(f"{view.call.path} is not a task (decorate it with @task)")
        if found.priority == view.priority and found.queue_name == view.queue:
            return found
        return found.using(priority=view.priority, queue_name=view.queue)

    def result_of(self, view: jobs.JobView) -> TaskResult:
        status = status_of(view)
        result: TaskResult = TaskResult(
            task=self.task_of(view),
            id=view.id,
            status=status,
            enqueued_at=instant(view.enqueued_at),
            started_at=instant(view.started_at),
            finished_at=instant(view.finished_at),
            last_attempted_at=instant(view.last_attempted_at),
            args=view.call.args,
            kwargs=view.call.kwargs,
            backend=self.alias,
            errors=[
                TaskError(exception_class_path=e["exception_class_path"], traceback=trace(e))
                for e in errors_of(view)
            ],
            worker_ids=view.worker_ids,
        )
        if status == TaskResultStatus.SUCCESSFUL:
            object.__setattr__(result, "_return_value", view.value)
        return result


def status_of(view: jobs.JobView) -> TaskResultStatus:
    """pending promise: RUNNING while an attempt holds the task, else READY (enqueued, waiting
    for a retry, halted); resolved: SUCCESSFUL; any rejection: FAILED."""
    if view.promise_state == "pending":
        if view.task_state == TaskState.ACQUIRED:
            return TaskResultStatus.RUNNING
        return TaskResultStatus.READY
    if view.promise_state == "resolved":
        return TaskResultStatus.SUCCESSFUL
    return TaskResultStatus.FAILED


def status_q(status: str, now: int) -> Q:
    """Jobs whose ``status_of`` is ``status`` at ``now``, as a query."""
    live = Q(task__promise__state="pending", task__promise__timeout_at__gt=now)
    acquired = Q(task__state=TaskState.ACQUIRED)
    resolved = Q(task__promise__state="resolved")
    match status:
        case TaskResultStatus.READY:
            return live & ~acquired
        case TaskResultStatus.RUNNING:
            return live & acquired
        case TaskResultStatus.SUCCESSFUL:
            return resolved
        case TaskResultStatus.FAILED:
            return ~live & ~resolved
    raise ValueError(f"unknown status {status!r}")


def errors_of(view: jobs.JobView) -> list[dict[str, str]]:
    """One error per failed attempt, plus why the call ended when no attempt's error says it
    (canceled, timed out, or rejected by someone else through the protocol)."""
    errors = list(view.errors)
    state = view.promise_state
    if state in ("pending", "resolved"):
        return errors
    if state == "rejected_timedout":
        return [*errors, jobs.task_error(jobs.TaskTimedOut, "the call's deadline passed", "")]
    final = view.value if isinstance(view.value, dict) else {}
    if "exception_class_path" in final and (not errors or errors[-1] != _error_fields(final)):
        errors.append(_error_fields(final))
    elif not errors:
        errors.append(jobs.task_error(jobs.TaskCanceled, f"promise {state}", ""))
    return errors


def _error_fields(value: dict[str, Any]) -> dict[str, str]:
    return {k: str(value.get(k, "")) for k in ("exception_class_path", "message", "traceback")}


def trace(error: dict[str, str]) -> str:
    """The traceback, or the message when there is none (a lost worker, a cancel)."""
    return error.get("traceback") or f"{error['exception_class_path']}: {error.get('message', '')}"
