"""The outbox (spec §1.4): a keyed set of messages committed with the state change that causes
them. ``execute`` is keyed by task id (the later version wins), ``unblock`` by promise and
address. ``revision`` grows on every upsert, so a deliverer deletes a row only if nobody replaced
it while the message was in flight.
"""

from __future__ import annotations

from django.db import models

# Rows addressed to an http(s):// destination (delivered by the push drain, not the SSE hub).
PUSH_Q = models.Q(address__startswith="http://") | models.Q(address__startswith="https://")


class MessageKind(models.TextChoices):
    EXECUTE = "execute"
    UNBLOCK = "unblock"


class Message(models.Model):
    key = models.TextField(primary_key=True)
    kind = models.CharField(max_length=10, choices=MessageKind.choices)
    address = models.TextField()
    task_id = models.TextField(null=True, blank=True)
    version = models.IntegerField(null=True, blank=True)
    promise = models.JSONField(null=True, blank=True, help_text="unblock: the settled record")
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
    (each adds what it counted, ``outbox.traffic``). Kept for a day, for the operator overview."""

    minute_ms = models.BigIntegerField(primary_key=True, help_text="ms: the minute's start")
    ok = models.IntegerField(default=0, help_text="answered below 400")
    client_errors = models.IntegerField(default=0, help_text="answered 4xx")
    server_errors = models.IntegerField(default=0, help_text="answered 5xx")

    def __str__(self) -> str:
        return str(self.minute_ms)
