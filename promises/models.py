"""Promise state (spec §1.1). Times are integer milliseconds, the protocol's unit.

The abstract (HEAD) shape is used: callbacks and listeners are rows that survive settlement until
the drains consume them. ``ready`` marks rows whose promise is settled so the drain steps find
their work through a partial index instead of a join over every outstanding subscription.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform

from resonate_project.core.limits import ID_MAX_LENGTH
from resonate_project.core.tags import ORIGIN


class PromiseState(models.TextChoices):
    PENDING = "pending"
    RESOLVED = "resolved"
    REJECTED = "rejected"
    REJECTED_CANCELED = "rejected_canceled"
    REJECTED_TIMEDOUT = "rejected_timedout"


class Promise(models.Model):
    id = models.CharField(primary_key=True, max_length=ID_MAX_LENGTH)
    state = models.CharField(max_length=20, choices=PromiseState.choices)
    param_headers = models.JSONField(null=True, blank=True)
    param_data = models.TextField(null=True, blank=True)
    value_headers = models.JSONField(null=True, blank=True)
    value_data = models.TextField(null=True, blank=True)
    tags = models.JSONField(default=dict, blank=True)
    timeout_at = models.BigIntegerField()
    created_at = models.BigIntegerField()
    settled_at = models.BigIntegerField(null=True, blank=True)
    # Derived from the (immutable) tags at birth, for indexes and admin filters.
    target = models.TextField(null=True, blank=True)
    timer = models.BooleanField(default=False)
    external = models.BooleanField(default=False)
    branch = models.TextField(null=True, blank=True)
    # ``resonate:parent`` (the call tree) and the function the SDK named in the param
    # (``core.calls``), for the console's run page, filters and per-function charts.
    parent = models.TextField(null=True, blank=True)
    function = models.TextField(null=True, blank=True)

    class Meta:
        indexes = [
            # R1: durable timeouts are armed for external promises only (C1).
            models.Index(
                fields=["timeout_at"],
                name="promise_armed_timeout",
                condition=Q(state="pending", external=True),
            ),
            models.Index(
                fields=["branch"], name="promise_branch", condition=Q(branch__isnull=False)
            ),
            models.Index(fields=["state", "id"], name="promise_state_id"),
            # Retention (engine/retention.py): settled promises oldest first, and a tree's
            # members by their resonate:origin tag.
            models.Index(
                fields=["settled_at", "id"],
                name="promise_settled",
                condition=Q(settled_at__isnull=False),
            ),
            models.Index(KeyTextTransform(ORIGIN, "tags"), name="promise_origin"),
            models.Index(
                fields=["parent"], name="promise_parent", condition=Q(parent__isnull=False)
            ),
            models.Index(
                fields=["function", "created_at"],
                name="promise_function",
                condition=Q(function__isnull=False),
            ),
        ]
        permissions = [("act_on_promise", "Can settle promises from the admin")]

    def __str__(self) -> str:
        return self.id


class Callback(models.Model):
    """``awaiter`` (a targeted promise whose task waits) is resumed when ``awaited`` settles."""

    awaited = models.ForeignKey(Promise, on_delete=models.CASCADE, related_name="callbacks")
    awaiter = models.ForeignKey(Promise, on_delete=models.CASCADE, related_name="awaiting")
    ready = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["awaited", "awaiter"], name="callback_unique"),
        ]
        indexes = [models.Index(fields=["id"], name="callback_ready", condition=Q(ready=True))]

    def __str__(self) -> str:
        return f"{self.awaiter_id} awaits {self.awaited_id}"


class Listener(models.Model):
    """``address`` gets an ``unblock`` message when ``awaited`` settles."""

    awaited = models.ForeignKey(Promise, on_delete=models.CASCADE, related_name="listeners")
    address = models.TextField()
    ready = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["awaited", "address"], name="listener_unique"),
        ]
        indexes = [models.Index(fields=["id"], name="listener_ready", condition=Q(ready=True))]

    def __str__(self) -> str:
        return f"{self.address} listens to {self.awaited_id}"


class DebugState(models.Model):
    """One row: whether debug.start paused the background steps (shared by every process)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    paused = models.BooleanField(default=False)

    def __str__(self) -> str:
        return "paused" if self.paused else "running"
