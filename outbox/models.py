"""The outbox (spec §1.4): a keyed set of messages committed with the state change that causes
them. ``execute`` is keyed by task id (the later version wins), ``unblock`` by promise and
address. ``revision`` grows on every upsert, so a deliverer deletes a row only if nobody replaced
it while the message was in flight.

Out of the due set are dead letters (``dead_at``), and among them the *undeliverable* messages
(``undeliverable_at`` as well): unicast poll messages whose stream stayed away for
``UNDELIVERABLE_AFTER_MS``, due again when it connects (``delivery.revive``).
"""

from __future__ import annotations

from typing import Any

from django.db import models

# Rows addressed to an http(s):// destination (delivered by the push drain, not the SSE hub).
PUSH_Q = models.Q(address__startswith="http://") | models.Q(address__startswith="https://")


class Unreadable(dict[str, Any]):
    """A stored JSON value that no longer decodes (a corrupt row): reads as an empty object, so
    the admin and the resource API still list its message, and the claim that meets it
    dead-letters the message with ``error``. The column itself is left as it is."""

    error = ""


class MessageJSONField(models.JSONField):
    """A JSON column whose unreadable value reads as :class:`Unreadable` instead of raising, so
    one corrupt message cannot fail every query that reads it along with the others."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        try:
            return super().from_db_value(value, expression, connection)
        except (ValueError, RecursionError) as exc:
            unreadable = Unreadable()
            unreadable.error = f"{type(exc).__name__}: {exc}"
            return unreadable


class MessageKind(models.TextChoices):
    EXECUTE = "execute"
    UNBLOCK = "unblock"


class Message(models.Model):
    key = models.TextField(primary_key=True)
    kind = models.CharField(max_length=10, choices=MessageKind.choices)
    address = models.TextField()
    task_id = models.TextField(null=True, blank=True)
    version = models.IntegerField(null=True, blank=True)
    promise = MessageJSONField(null=True, blank=True, help_text="unblock: the settled record")
    created_at = models.BigIntegerField(help_text="ms: when the transition wrote it")
    revision = models.BigIntegerField(default=1)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.BigIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    poll_route = models.TextField(
        null=True,
        blank=True,
        help_text="poll:// messages: what the SSE hub claims them by (delivery.poll_route)",
    )
    dead_at = models.BigIntegerField(
        null=True, blank=True, help_text="ms: when it was dead-lettered (no more attempts)"
    )
    undeliverable_at = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="ms: when it was set aside as undeliverable (a poll://uni@ address with no "
        "stream for UNDELIVERABLE_AFTER_MS; dead_at is set too), until that stream connects",
    )

    class Meta:
        indexes = [
            # Claims read only live rows in due order; dead letters are listed on their own.
            models.Index(
                fields=["next_attempt_at"],
                name="outbox_due",
                condition=models.Q(dead_at__isnull=True),
            ),
            models.Index(
                fields=["dead_at"], name="outbox_dead", condition=models.Q(dead_at__isnull=False)
            ),
            # A stream that connects takes its undeliverable messages back, by route.
            models.Index(
                fields=["poll_route"],
                name="outbox_undeliverable",
                condition=models.Q(undeliverable_at__isnull=False),
            ),
            # The SSE hub claims by route, one IN list per chunk of the routes it holds.
            models.Index(
                fields=["poll_route", "next_attempt_at"],
                name="outbox_poll_due",
                condition=models.Q(poll_route__isnull=False),
            ),
        ]
        permissions = [("act_on_message", "Can re-send outbox messages from the admin")]

    def __str__(self) -> str:
        return self.key


class Subscriber(models.Model):
    """An SSE stream connected to some web process: lets ``poll://any@group/id`` prefer the stream
    ``id`` wherever it is connected. Refreshed while connected; stale rows are ignored, and deleted
    after a minute (a web process killed with streams open leaves its rows behind)."""

    group = models.TextField()
    stream_id = models.TextField()
    process = models.CharField(max_length=200)
    seen_at = models.BigIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "stream_id", "process"], name="subscriber_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.group}/{self.stream_id}@{self.process}"


class RequestMinute(models.Model):
    """``POST /`` requests answered in one minute, by status class, summed over every web process
    (each adds what it counted, ``resonate_project.runtime.traffic``). Kept for a day, for the
    operator overview."""

    minute_ms = models.BigIntegerField(primary_key=True, help_text="ms: the minute's start")
    ok = models.IntegerField(default=0, help_text="answered below 400")
    client_errors = models.IntegerField(default=0, help_text="answered 4xx")
    server_errors = models.IntegerField(default=0, help_text="answered 5xx")

    def __str__(self) -> str:
        return str(self.minute_ms)


class RetentionTotal(models.Model):
    """Rows retention deleted (``engine.retention``), by kind, summed over every runner since the
    table was made; shown on the operator overview."""

    kind = models.CharField(
        max_length=20, primary_key=True, help_text="trees, promises, tasks, django_tasks, …"
    )
    rows = models.BigIntegerField(default=0)
    last_at = models.BigIntegerField(
        null=True, blank=True, help_text="ms: the last pass that deleted"
    )

    def __str__(self) -> str:
        return f"{self.kind}: {self.rows}"


class Quarantine(models.Model):
    """A row an internal step could not process (it raised while the rest of its batch did not):
    set aside so the step goes on with the others, and shown to operators with its error. The
    step skips the row while its due time is still ``due_at``; a row whose due time changes, or
    whose entry an operator deletes (the admin, Outbox → Quarantined rows), is tried again."""

    step = models.CharField(max_length=50, help_text="the step that raised (engine.steps)")
    row = models.TextField(help_text="the row's primary key")
    due_at = models.BigIntegerField(
        null=True, blank=True, help_text="ms: the row's due time when it was set aside"
    )
    error = models.TextField()
    at = models.BigIntegerField(help_text="ms: when it was set aside")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["step", "row"], name="quarantine_unique")]
        verbose_name = "quarantined row"

    def __str__(self) -> str:
        return f"{self.step}: {self.row}"
