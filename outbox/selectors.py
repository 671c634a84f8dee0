"""Read queries over the outbox, and the record the admin and the resource API show of a
message."""

from __future__ import annotations

from typing import Any

from outbox.models import Message, Unreadable


def message_record(m: Message) -> dict[str, Any]:
    """A message as the resource API shows it; ``deadAt`` only on a dead letter, and
    ``undeliverableAt`` as well on an undeliverable one."""
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
    elif isinstance(m.promise, Unreadable):  # a corrupt row (dead-lettered by its claim)
        record["promise"] = {"id": None, "state": None}
    elif m.promise:
        record["promise"] = {"id": m.promise.get("id"), "state": m.promise.get("state")}
    if m.dead_at is not None:
        record["deadAt"] = m.dead_at
    if m.undeliverable_at is not None:
        record["undeliverableAt"] = m.undeliverable_at
    return record
