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

    class Meta:
        indexes = [
            models.Index(fields=["retry_at"], name="task_due_retry", condition=Q(state="pending")),
            models.Index(
                fields=["expires_at"], name="task_due_lease", condition=Q(state="acquired")
            ),
        ]
        permissions = [("act_on_task", "Can halt, continue and expire tasks from the admin")]

    def __str__(self) -> str:
        return f"{self.promise_id}@{self.version}"
