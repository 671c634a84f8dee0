"""Task state (spec §1.2). A task exists iff its promise is targeted and shares its id.

The timer kind is a function of the state (L3): ``retry_at`` is set iff pending, ``expires_at``
(with ``pid`` and ``ttl``) iff acquired.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from promises.models import Promise


class TaskState(models.TextChoices):
    PENDING = "pending"
    ACQUIRED = "acquired"
    SUSPENDED = "suspended"
    HALTED = "halted"
    FULFILLED = "fulfilled"


class Task(models.Model):
    promise = models.OneToOneField(
        Promise, primary_key=True, on_delete=models.CASCADE, related_name="task", db_column="id"
    )
    state = models.CharField(max_length=10, choices=TaskState.choices)
    version = models.IntegerField(default=0)
    ttl = models.BigIntegerField(null=True, blank=True)
    pid = models.TextField(null=True, blank=True)
    expires_at = models.BigIntegerField(null=True, blank=True)
    retry_at = models.BigIntegerField(null=True, blank=True)
    resumes = models.JSONField(default=list, blank=True)
    release_count = models.IntegerField(
        default=0,
        db_default=0,
        help_text="task.release calls since the task last made progress (suspended, resumed, "
        "continued); from the second on, each delays the next execute",
    )
    last_release_at = models.BigIntegerField(
        null=True, blank=True, help_text="ms: the last task.release"
    )
    last_pid = models.TextField(
        null=True, blank=True, help_text="the process that acquired the task last"
    )

    class Meta:
        indexes = [
            models.Index(fields=["retry_at"], name="task_due_retry", condition=Q(state="pending")),
            models.Index(
                fields=["expires_at"], name="task_due_lease", condition=Q(state="acquired")
            ),
            # The tasks waiting out a release back-off, offered again when a stream joins their
            # group (engine.task_transitions.redispatch_backed_off): few rows, read on every new
            # stream.
            models.Index(
                fields=["retry_at"],
                name="task_backed_off",
                condition=Q(state="pending", release_count__gte=2),
            ),
        ]
        permissions = [("act_on_task", "Can halt, continue and expire tasks from the admin")]

    def __str__(self) -> str:
        return f"{self.promise_id}@{self.version}"


class Job(models.Model):
    """A call enqueued through Django's Tasks framework (``tasks_app.backends``), run on the task
    that shares its id. The promise holds the call (param) and its outcome (value), the task
    the lease; this row holds what neither has: how the worker orders its claims (queue,
    priority, ``due_at``), the retry policy fixed at enqueue, and the history ``TaskResult``
    reports (one worker id per attempt, one error per failed attempt).
    """

    task = models.OneToOneField(
        Task, primary_key=True, on_delete=models.CASCADE, related_name="job", db_column="id"
    )
    backend = models.CharField(max_length=200)
    queue = models.CharField(max_length=200)
    function = models.TextField(help_text="the task's module path")
    priority = models.IntegerField(default=0)
    due_at = models.BigIntegerField(help_text="ms: not before (run_after, then each retry)")
    max_attempts = models.IntegerField()
    backoff_ms = models.BigIntegerField(help_text="first retry delay; doubles per failure")
    backoff_max_ms = models.BigIntegerField()
    enqueued_at = models.BigIntegerField()
    started_at = models.BigIntegerField(null=True, blank=True)
    last_attempted_at = models.BigIntegerField(null=True, blank=True)
    running = models.IntegerField(
        null=True, blank=True, help_text="the task version of the attempt in progress"
    )
    worker_ids = models.JSONField(default=list, blank=True)
    errors = models.JSONField(default=list, blank=True)
    finished = models.BooleanField(
        default=False, help_text="its promise is settled: never claimed again"
    )

    class Meta:
        verbose_name = "Django task"
        indexes = [
            # The claim walks this in order; finished jobs leave it, so it holds only the queue.
            models.Index(
                "backend",
                "queue",
                models.F("priority").desc(),
                "due_at",
                name="job_claim_order",
                condition=Q(finished=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.function} {self.task_id}"
