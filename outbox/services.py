"""Operator operations on the outbox (the admin's and the resource API's "re-send").

Each is one transaction with ``now`` passed in; a refusal raises a ``core.errors.ProtocolError``.
The outbox row stays the only record of what must be delivered; these change when it is tried,
never what it says.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from outbox.models import Message
from resonate_project.core.addresses import is_push
from resonate_project.core.errors import Conflict, NotFound
from resonate_project.engine import wake

MESSAGE_NOT_FOUND = "message not found (delivered, or never written)"


def resend(*, key: str, now: int) -> None:
    """Make one message due at ``now`` as if newly written (a dead letter or an undeliverable
    message is live again): no
    attempts, no error, and a new ``revision``, which fences out a claim still in flight (its late
    ack or failure then matches nothing, exactly as when its lease lapses). Delivery stays at
    least once: a message that was in fact delivered by that claim is delivered again, which
    every receiver must tolerate."""
    with transaction.atomic():
        m = Message.objects.select_for_update().filter(key=key).first()
        if m is None:
            raise NotFound(MESSAGE_NOT_FOUND, field="key")
        Message.objects.filter(key=key).update(
            next_attempt_at=now,
            attempts=0,
            last_error="",
            dead_at=None,
            undeliverable_at=None,
            revision=F("revision") + 1,
        )
        wake.after_commit(push=is_push(m.address))


def purge(*, key: str) -> Message:
    """Delete one dead letter or undeliverable message for good (an operator gave up on it);
    returns it as it was. ``Conflict`` for a message still being delivered: purging it would lose
    what is owed to a receiver that may yet take it."""
    with transaction.atomic():
        m = Message.objects.select_for_update().filter(key=key).first()
        if m is None:
            raise NotFound(MESSAGE_NOT_FOUND, field="key")
        if m.dead_at is None:
            raise Conflict(
                "only dead letters and undeliverable messages can be purged; this one is "
                "still being delivered",
                field="key",
            )
        Message.objects.filter(key=key, revision=m.revision).delete()
        return m
