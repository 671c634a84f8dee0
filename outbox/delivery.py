"""Claiming and settling outbox rows, shared by every transport.

Delivery is at least once. A drainer *leases* due rows (``next_attempt_at`` moves to
``now + IN_FLIGHT_MS`` and ``attempts`` grows) in one short transaction, delivers them outside
any transaction, then deletes each delivered row only if its ``revision`` is unchanged: a newer
upsert that replaced the message in flight stays and is delivered in turn. A drainer that dies
mid-delivery loses nothing: its lease lapses and the rows are claimed again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q

from promises.conf import resonate_settings

from .models import Message


@dataclass(frozen=True, slots=True)
class Claimed:
    key: str
    revision: int
    kind: str
    address: str
    attempts: int
    body: bytes


def wire(m: Message) -> dict[str, Any]:
    """The message as the reference server sends it (execute head carries serverUrl)."""
    if m.kind == "execute":
        url = resonate_settings().SERVER_URL
        return {
            "kind": "execute",
            "head": {"serverUrl": url} if url else {},
            "data": {"task": {"id": m.task_id, "version": m.version}},
        }
    return {"kind": "unblock", "head": {}, "data": {"promise": m.promise}}


def encode(m: Message) -> bytes:
    return json.dumps(wire(m), sort_keys=True, separators=(",", ":")).encode()


def claim(where: Q, now: int, limit: int) -> list[Claimed]:
    """Lease up to ``limit`` due rows matching ``where`` (SKIP LOCKED: concurrent drainers never
    take the same row). The claim bumps ``revision``, which fences the delivery: if the lease
    lapses and another drainer claims the row, the first one's late ack or failure no longer
    matches and changes nothing."""
    lease = resonate_settings().IN_FLIGHT_MS
    with transaction.atomic():
        rows = list(
            Message.objects.select_for_update(skip_locked=True)
            .filter(where, next_attempt_at__lte=now)
            .order_by("next_attempt_at")[:limit]
        )
        if not rows:
            return []
        Message.objects.filter(key__in=[m.key for m in rows]).update(
            next_attempt_at=now + lease, attempts=F("attempts") + 1, revision=F("revision") + 1
        )
    return [
        Claimed(m.key, m.revision + 1, m.kind, m.address, m.attempts + 1, encode(m)) for m in rows
    ]


_TABLE = Message._meta.db_table
# Pairs per statement: a row-value IN list is planned as one index probe per pair.
_CHUNK = 500


def _matching(items: list[Claimed], sql: str, params: list[Any]) -> int:
    """Run ``sql`` (with a ``{pairs}`` slot) for the rows still at the claimed revisions."""
    done = 0
    with connection.cursor() as cursor:
        for i in range(0, len(items), _CHUNK):
            chunk = items[i : i + _CHUNK]
            pairs = ", ".join(["(%s, %s)"] * len(chunk))
            values = [v for c in chunk for v in (c.key, c.revision)]
            cursor.execute(sql.format(table=_TABLE, pairs=pairs), [*params, *values])
            done += cursor.rowcount
    return done


def ack(items: list[Claimed]) -> int:
    """Delivered: delete the rows nobody replaced meanwhile."""
    if not items:
        return 0
    return _matching(items, "DELETE FROM {table} WHERE (key, revision) IN (VALUES {pairs})", [])


def release(items: list[Claimed], now: int) -> None:
    """Not delivered and not a failure (e.g. the stream went away): due again at once."""
    if items:
        _matching(
            items,
            "UPDATE {table} SET next_attempt_at = %s, attempts = attempts - 1, "
            "revision = revision + 1 WHERE (key, revision) IN (VALUES {pairs})",
            [now],
        )


def backoff_ms(attempts: int) -> int:
    conf = resonate_settings()
    return min(conf.PUSH_BACKOFF_BASE_MS * 2 ** max(attempts - 1, 0), conf.PUSH_BACKOFF_MAX_MS)


def fail(item: Claimed, now: int, error: str) -> None:
    """A delivery attempt failed: try again after a bounded exponential backoff. Never dropped."""
    Message.objects.filter(key=item.key, revision=item.revision).update(
        next_attempt_at=now + backoff_ms(item.attempts),
        last_error=error[:2000],
        revision=F("revision") + 1,
    )


# --- addresses ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PollAddress:
    mode: str  # "uni" or "any"
    group: str
    id: str | None


def parse_poll(address: str) -> PollAddress | None:
    """``poll://uni@{group}/{id}``, ``poll://any@{group}`` or ``poll://any@{group}/{id}``;
    case-sensitive (no URL parser lowercases the group)."""
    if not address.startswith("poll://"):
        return None
    mode, sep, rest = address[len("poll://") :].partition("@")
    if not sep or mode not in ("uni", "any") or not rest:
        return None
    group, slash, stream_id = rest.partition("/")
    if not group or (mode == "uni" and not stream_id):
        return None
    return PollAddress(mode, group, stream_id if slash and stream_id else None)


def is_push(address: str) -> bool:
    return address.startswith(("http://", "https://"))


PUSH_Q = Q(address__startswith="http://") | Q(address__startswith="https://")
