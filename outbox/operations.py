"""Operator operations on the outbox (the admin's and the resource API's "re-send"), and the
record both show of a message.

Each is one transaction with ``now`` passed in. The outbox row stays the only record of what
must be delivered; these change when it is tried, never what it says.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F

from outbox.models import Message
from resonate_project.core.addresses import is_push
from resonate_project.core.protocol import Response, fail, ok
from resonate_project.engine import wake as notify

MESSAGE_NOT_FOUND = "message not found (delivered, or never written)"


def resend(key: str, now: int) -> Response:
    """Make one message due at ``now`` as if newly written (a dead letter is live again): no
    attempts, no error, and a new ``revision``, which fences out a claim still in flight (its late
    ack or failure then matches nothing, exactly as when its lease lapses). Delivery stays at
    least once: a message that was in fact delivered by that claim is delivered again, which
    every receiver must tolerate."""
    with transaction.atomic():
        m = Message.objects.select_for_update().filter(key=key).first()
        if m is None:
            return fail(404, MESSAGE_NOT_FOUND)
        Message.objects.filter(key=key).update(
            next_attempt_at=now,
            attempts=0,
            last_error="",
            dead_at=None,
            revision=F("revision") + 1,
        )
        notify.after_commit(push=is_push(m.address))
        return ok({"key": key, "address": m.address})


def message_record(m: Message) -> dict[str, Any]:
    """A message as the resource API shows it; ``deadAt`` only on a dead letter."""
    record: dict[str, Any] = {
        "key": m.key,
        "kind": m.kind,
        "address": m.address,
        "createdAt": m.created_at,
        "attempts": m.attempts,
        "nextAttemptAt": m.next_attempt_at,
        "lastError": m.last_error,
    }
    if m.kind == "execute":
        record["task"] = {"id": m.task_id, "version": m.version}
    elif m.promise:
        record["promise"] = {"id": m.promise.get("id"), "state": m.promise.get("state")}
    if m.dead_at is not None:
        record["deadAt"] = m.dead_at
    return record
