"""Claiming and settling outbox rows, shared by every transport.

Delivery is at least once. A drainer *leases* due rows (``next_attempt_at`` moves to
``now + IN_FLIGHT_MS`` and ``attempts`` grows) in one short transaction, delivers them outside
any transaction, then deletes each delivered row only if its ``revision`` is unchanged: a newer
upsert that replaced the message in flight stays and is delivered in turn. A drainer that dies
mid-delivery loses nothing: its lease lapses and the rows are claimed again.

A push message that keeps failing is *dead-lettered* (``dead_at`` set) after ``PUSH_MAX_ATTEMPTS``
attempts or ``PUSH_MAX_AGE_MS`` after it was written: kept, never claimed again, listed in the
admin and the resource API, and due again when an operator re-sends it or a newer upsert of its
key replaces it.

An ``execute`` claimed after its task moved on (acquired at or past its version, fulfilled,
halted or suspended, or its promise settled or timed out) is removed instead of sent: no worker
could acquire it (``resonate_outbox_stale_skipped_total``). An undeliverable message (unicast,
no stream for ``UNDELIVERABLE_AFTER_MS``, ``engine.outbox.set_aside_undeliverable``) is out of
the due set until its stream connects (:func:`revive`) or an operator re-sends it.

A row that cannot be read back (a corrupt value that no longer decodes, say) is dead-lettered by
the claim that meets it, with the error, and the claim goes on with the other rows: one bad row
never holds up a drainer's batch (docs/explanation/delivery.md#poison-rows-and-streams).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q

from outbox.models import Message, Unreadable
from promises.models import PromiseState
from resonate_project.core.conf import resonate_settings
from resonate_project.engine import rows
from resonate_project.observability import metrics
from tasks_app.models import Task, TaskState

log = logging.getLogger("resonate.delivery")

# Failures of the database itself (unreachable, restarting, a deadlock): never the fault of one row,
# so a loop keeps what it was doing for its next pass instead of setting a row aside.
UNAVAILABLE: tuple[type[Exception], ...] = (OperationalError, InterfaceError)
ERROR_MAX_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Claimed:
    key: str
    revision: int
    kind: str
    address: str
    attempts: int
    body: bytes
    created_at: int = 0
    # An execute sent again after its task was released: the stream id (an SDK's pid) that
    # released it last, which anycast routing passes over when the group has another stream.
    avoid: str | None = None


def wire(m: Message) -> dict[str, Any]:
    """The message as the reference server sends it (execute head carries serverUrl)."""
    if m.kind == "execute":
        url = resonate_settings().SERVER_URL
        return {
            "kind": "execute",
            "head": {"serverUrl": url} if url else {},
            "data": {"task": {"id": m.task_id, "version": m.version}},
        }
    if isinstance(m.promise, Unreadable):
        raise ValueError(f"its stored promise does not decode ({m.promise.error})")
    return {"kind": "unblock", "head": {}, "data": {"promise": m.promise}}


def encode(m: Message) -> bytes:
    return json.dumps(wire(m), sort_keys=True, separators=(",", ":")).encode()


def claim(where: Q, now: int, limit: int, lease: int | None = None) -> list[Claimed]:
    """Lease up to ``limit`` due rows matching ``where`` for ``lease`` ms (``IN_FLIGHT_MS`` by
    default; SKIP LOCKED: concurrent drainers never take the same row). The claim bumps
    ``revision``, which fences the delivery: if the lease lapses and another drainer claims the
    row, the first one's late ack or failure no longer matches and changes nothing. The rows come
    oldest due first."""
    if lease is None:
        lease = resonate_settings().IN_FLIGHT_MS
    if connection.vendor == "postgresql":
        due = (
            Message.objects.filter(where, next_attempt_at__lte=now, dead_at__isnull=True)
            .order_by("next_attempt_at")
            .values("key", "next_attempt_at")[:limit]
        )
        sql, params = due.query.sql_with_params()
        return _claim_due(sql, list(params), now, now + lease)
    with transaction.atomic():
        # Raw rows, so that one that does not decode is set aside instead of failing the claim.
        locked = (
            Message.objects.select_for_update(skip_locked=True)
            .filter(where, next_attempt_at__lte=now, dead_at__isnull=True)
            .order_by("next_attempt_at")[:limit]
        )
        sql, params = locked.query.sql_with_params()
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            found = [list(row) for row in cursor.fetchall()]
        if not found:
            return []
        Message.objects.filter(key__in=[row[_KEY] for row in found]).update(
            next_attempt_at=now + lease, attempts=F("attempts") + 1, revision=F("revision") + 1
        )
    for row in found:  # as the claim left them
        row[_REVISION] += 1
        row[_ATTEMPTS] += 1
    return _claimed(found, now)


def claim_routes(routes: Sequence[str], now: int, limit: int, lease: int) -> list[Claimed]:
    """``claim`` of the rows whose ``poll_route`` is one of ``routes`` (the SSE hub's pass, after
    every commit that wrote a message): on PostgreSQL one statement written once, instead of a
    queryset compiled per pass and a transaction of four round trips."""
    if connection.vendor != "postgresql":
        return claim(Q(poll_route__in=routes), now, limit, lease)
    marks = ", ".join(["%s"] * len(routes))
    due = (
        f"SELECT {_q('key')}, {_q('next_attempt_at')} FROM {_q(_TABLE)} "
        f"WHERE {_q('poll_route')} IN ({marks}) AND {_q('next_attempt_at')} <= %s "
        f"AND {_q('dead_at')} IS NULL ORDER BY {_q('next_attempt_at')} LIMIT %s"
    )
    return _claim_due(due, [*routes, now, limit], now, now + lease)


def _q(name: str) -> str:
    return str(connection.ops.quote_name(name))


@lru_cache(maxsize=256)
def _claim_sql(due: str) -> str:
    """Lock the rows ``due`` selects (key, next_attempt_at), skipping rows another drainer holds,
    and lease them, in one autocommit statement: the rows with their due time before the claim."""
    columns = ", ".join(f"m.{_q(str(f.column))}" for f in Message._meta.concrete_fields)
    return (
        f"UPDATE {_q(_TABLE)} AS m SET {_q('next_attempt_at')} = %s, "
        f"{_q('attempts')} = m.{_q('attempts')} + 1, {_q('revision')} = m.{_q('revision')} + 1 "
        f"FROM ({due} FOR UPDATE SKIP LOCKED) AS due WHERE m.{_q('key')} = due.{_q('key')} "
        f"RETURNING due.{_q('next_attempt_at')}, {columns}"
    )


def _claim_due(due: str, params: list[Any], now: int, until: int) -> list[Claimed]:
    with connection.cursor() as cursor:
        cursor.execute(_claim_sql(due), [until, *params])
        found = sorted(cursor.fetchall(), key=lambda row: (row[0], row[1]))
    return _claimed([row[1:] for row in found], now)


def _claimed(found: Sequence[Sequence[Any]], now: int) -> list[Claimed]:
    """The claimed rows (every column, in field order) as messages to send. A row that does not
    decode or encode is dead-lettered with its error (its lease is its claim's) and left out, and
    so is a stale execute, which is removed (:func:`_current`)."""
    out = []
    executes: dict[str, tuple[int, int | None]] = {}  # key -> (position, version)
    for raw in found:
        try:
            (m,) = rows.build(Message, [raw])
            out.append(
                Claimed(m.key, m.revision, m.kind, m.address, m.attempts, encode(m), m.created_at)
            )
            if m.kind == "execute" and m.task_id == m.key:
                executes[m.key] = (len(out) - 1, m.version)
        except UNAVAILABLE:
            raise
        except Exception as exc:
            key, revision = raw[_KEY], raw[_REVISION]
            log.exception("outbox message %s cannot be read; dead-lettered", key)
            dead_letter(key, revision, now, f"unreadable row: {error_text(exc)}")
    return _current(out, executes, now) if executes else out


def _current(
    out: list[Claimed], executes: dict[str, tuple[int, int | None]], now: int
) -> list[Claimed]:
    """``out`` without its stale executes: those whose task is no longer pending at the
    message's version (acquired or released past it, fulfilled, halted, suspended, or its promise
    settled or past its deadline), which no worker could acquire. They are deleted (fenced by
    the claim's revision: a newer execute of that task written meanwhile stays) and counted
    (``resonate_outbox_stale_skipped_total``). An execute of a task still pending at its version
    is always sent; that of a task released before carries the releaser's pid (``avoid``)."""
    found = list(
        Task.objects.filter(pk__in=list(executes)).values_list(
            "pk",
            "state",
            "version",
            "promise__state",
            "promise__timeout_at",
            "release_count",
            "last_pid",
        )
    )
    current: dict[str, tuple[int, str | None]] = {}
    for pk, state, version, p_state, timeout_at, releases, last_pid in found:
        pending = state == TaskState.PENDING and p_state == PromiseState.PENDING
        if pending and timeout_at > now and version == executes[pk][1]:
            current[pk] = (releases, last_pid)
    # A task that does not exist (a debug.reset since) is not judged here: sent as before.
    for key in set(executes) - {row[0] for row in found}:
        current[key] = (0, None)
    stale = [out[i] for key, (i, _) in executes.items() if key not in current]
    if stale:
        ack(stale)
        metrics.record_stale_skipped("execute", len(stale))
    kept = []
    for item in out:
        if item.kind == "execute" and item.key in executes:
            if item.key not in current:
                continue
            releases, last_pid = current[item.key]
            if releases and last_pid:
                item = replace(item, avoid=last_pid)
        kept.append(item)
    return kept


def dead_letter(key: str, revision: int, now: int, error: str) -> bool:
    """Set this message aside as a dead letter at once (it can never be delivered as it is),
    unless it changed since ``revision``; an operator sees it with ``error`` and may re-send it.
    True if it was."""
    return bool(
        Message.objects.filter(key=key, revision=revision).update(
            dead_at=now,
            next_attempt_at=now,
            last_error=safe_text(error),
            revision=F("revision") + 1,
        )
    )


def error_text(exc: BaseException) -> str:
    return safe_text(f"{type(exc).__name__}: {exc}")


def safe_text(text: str) -> str:
    """``text`` as a text column of any database stores it: at most ``ERROR_MAX_CHARS``, and no
    NUL (PostgreSQL refuses it, so an error quoting a NUL byte would fail its own write)."""
    return text[:ERROR_MAX_CHARS].replace("\x00", "\\x00")


_TABLE = Message._meta.db_table
_NAMES = [str(f.attname) for f in Message._meta.concrete_fields]
_KEY, _REVISION, _ATTEMPTS = (_NAMES.index(n) for n in ("key", "revision", "attempts"))
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


def revive(routes: Sequence[str], now: int) -> int:
    """A stream for these routes is connected: its undeliverable messages (unicast, set aside
    while nobody held that stream) are due again at once, live as if written now. Returns how
    many. Most calls find none: a read of the partial index answers that per chunk of routes,
    and no write is taken then (the hub calls this on every refresh of its registrations)."""
    n = 0
    for i in range(0, len(routes), _CHUNK):
        found = Message.objects.filter(
            poll_route__in=routes[i : i + _CHUNK], undeliverable_at__isnull=False
        )
        if found.exists():
            n += found.update(
                dead_at=None,
                undeliverable_at=None,
                next_attempt_at=now,
                attempts=0,
                last_error="",
                revision=F("revision") + 1,
            )
    metrics.record_undeliverable("revived", n)
    return n


def release(items: list[Claimed], now: int) -> None:
    """Not delivered and not a failure (e.g. the stream went away): due again at once."""
    if items:
        _matching(
            items,
            "UPDATE {table} SET next_attempt_at = %s, attempts = attempts - 1, "
            "revision = revision + 1 WHERE (key, revision) IN (VALUES {pairs})",
            [now],
        )


def defer(keys: list[str], now: int, until: int) -> int:
    """Not claimed, not tried: make these due rows due at ``until`` instead (a push destination
    that could not be reached). A row claimed meanwhile is no longer due and is left alone."""
    return Message.objects.filter(
        key__in=keys, next_attempt_at__lte=now, dead_at__isnull=True
    ).update(next_attempt_at=until)


def backoff_ms(attempts: int) -> int:
    conf = resonate_settings()
    return min(conf.PUSH_BACKOFF_BASE_MS * 2 ** max(attempts - 1, 0), conf.PUSH_BACKOFF_MAX_MS)


def fail(item: Claimed, now: int, error: str) -> bool:
    """A delivery attempt failed: try again after a bounded exponential backoff, or dead-letter
    the message once it has had ``PUSH_MAX_ATTEMPTS`` attempts or is ``PUSH_MAX_AGE_MS`` old
    (its last attempt is moved up to that age). Never dropped. True if it was dead-lettered."""
    conf = resonate_settings()
    deadline = item.created_at + conf.PUSH_MAX_AGE_MS if conf.PUSH_MAX_AGE_MS > 0 else None
    spent = 0 < conf.PUSH_MAX_ATTEMPTS <= item.attempts
    dead = spent or (deadline is not None and now >= deadline)
    retry_at = now + backoff_ms(item.attempts)
    if deadline is not None:
        retry_at = min(retry_at, deadline)
    Message.objects.filter(key=item.key, revision=item.revision).update(
        next_attempt_at=now if dead else retry_at,
        dead_at=now if dead else None,
        last_error=safe_text(error),
        revision=F("revision") + 1,
    )
    return dead
