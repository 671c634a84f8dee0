"""Keyed outbox upserts (spec §1.4 ``setMessage``), run inside the caller's transaction.

``execute`` is keyed by task id, so a newer execute replaces an undelivered older one (the later
version wins); ``unblock`` by ``<promise id>:notify:<address>``. Each upsert bumps ``revision`` and
resets the delivery bookkeeping (a dead letter or an undeliverable message replaced this way is
live again), and asks for a drain once the transaction commits.

:func:`set_aside_undeliverable` is the sweep that takes unicast poll messages nobody can receive
out of the due set (``UNDELIVERABLE_AFTER_MS``), and :func:`drop_stale_executes` the one that
deletes executes no worker could act on.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, F, OuterRef, TextField, Value
from django.db.models.functions import Concat

from outbox.models import Message, Subscriber
from promises.models import PromiseState
from resonate_project.core.addresses import is_push, poll_route
from resonate_project.core.conf import resonate_settings
from resonate_project.engine import wake
from resonate_project.observability import metrics
from tasks_app.models import Task, TaskState

_TABLE = Message._meta.db_table
_SQL = """
INSERT INTO {table} (key, kind, address, task_id, version, promise, created_at, revision,
                     attempts, next_attempt_at, last_error, poll_route)
VALUES (%s, %s, %s, %s, %s, {json}, %s, 1, 0, %s, '', %s)
ON CONFLICT (key) DO UPDATE SET
    kind = excluded.kind, address = excluded.address, task_id = excluded.task_id,
    version = excluded.version, promise = excluded.promise, created_at = excluded.created_at,
    revision = {table}.revision + 1, attempts = 0, next_attempt_at = excluded.next_attempt_at,
    last_error = '', poll_route = excluded.poll_route, dead_at = NULL, undeliverable_at = NULL
"""


def _sql() -> str:
    json_param = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
    return _SQL.format(table=_TABLE, json=json_param)


def _upsert(
    key: str,
    kind: str,
    address: str,
    task_id: str | None,
    version: int | None,
    promise: dict[str, Any] | None,
    now: int,
) -> None:
    payload = None if promise is None else json.dumps(promise, separators=(",", ":"))
    with connection.cursor() as cursor:
        route = poll_route(address)
        cursor.execute(_sql(), [key, kind, address, task_id, version, payload, now, now, route])
    metrics.record_message(kind)
    wake.after_commit(push=is_push(address))


def execute(task_id: str, version: int, address: str, now: int) -> None:
    _upsert(task_id, "execute", address, task_id, version, None, now)


def unblock(record: dict[str, Any], address: str, now: int) -> None:
    _upsert(f"{record['id']}:notify:{address}", "unblock", address, None, None, record, now)


UNICAST = "poll://uni@"


def subscriber_fresh_after(now: int) -> int:
    """A ``Subscriber`` row refreshed since this instant is a stream connected now (each hub
    refreshes its rows every ``POLL_FALLBACK_MS``; a dead process's rows go stale)."""
    return now - 3 * max(resonate_settings().POLL_FALLBACK_MS, 1000)


def set_aside_undeliverable(now: int, limit: int) -> int:
    """Take out of the due set the ``poll://uni@{group}/{id}`` messages due for at least
    ``UNDELIVERABLE_AFTER_MS`` whose stream no web process holds (no fresh ``Subscriber`` row
    for ``(group, id)``): dead letters marked undeliverable, kept with the reason. The hub that
    next opens that stream makes them due again (``outbox.delivery.revive``). A message in
    flight is not due, so never taken. Returns how many."""
    window = resonate_settings().UNDELIVERABLE_AFTER_MS
    if window <= 0:
        return 0
    connected = Subscriber.objects.annotate(
        route=Concat("group", Value("/"), "stream_id", output_field=TextField())
    ).filter(route=OuterRef("poll_route"), seen_at__gte=subscriber_fresh_after(now))
    with transaction.atomic():
        keys = list(
            Message.objects.select_for_update(skip_locked=True)
            .filter(
                dead_at__isnull=True,
                address__startswith=UNICAST,
                next_attempt_at__lte=now - window,
            )
            .exclude(Exists(connected))
            .order_by("next_attempt_at")
            .values_list("key", flat=True)[:limit]
        )
        if not keys:
            return 0
        n = Message.objects.filter(
            key__in=keys, dead_at__isnull=True, next_attempt_at__lte=now - window
        ).update(
            dead_at=now,
            undeliverable_at=now,
            last_error=f"undeliverable: no stream for its address for {window // 1000} s",
            revision=F("revision") + 1,
        )
    metrics.record_undeliverable("set_aside", n)
    return n


# Where the stale-execute sweep of this process goes on from (an outbox key; "" from the start):
# each run reads at most ``limit`` due executes, so a large backlog of executes still owed costs
# a tick a bounded read, and every due execute is looked at within a few ticks.
_stale_after = [""]


def drop_stale_executes(now: int, limit: int) -> int:
    """Delete the due ``execute`` messages whose task is no longer pending at the message's
    version (acquired or released past it, suspended, halted, fulfilled, or its promise settled
    or past its deadline): no worker could acquire them, and one addressed to a group nobody
    streams from would otherwise stay due forever. The claims skip them too
    (``outbox.delivery``); this sweep finds those no claim meets. An execute of a task still
    pending at that version is owed and stays. Returns how many."""
    tasks = Task.objects.filter(pk=OuterRef("task_id"))
    current = tasks.filter(
        state=TaskState.PENDING,
        version=OuterRef("version"),
        promise__state=PromiseState.PENDING,
        promise__timeout_at__gt=now,
    )
    due = Message.objects.filter(kind="execute", dead_at__isnull=True, next_attempt_at__lte=now)
    with transaction.atomic():
        looked = list(
            due.filter(key__gt=_stale_after[0])
            .order_by("key")
            .values_list("key", flat=True)[:limit]
        )
        _stale_after[0] = looked[-1] if len(looked) == limit else ""
        if not looked:
            return 0
        keys = list(
            due.select_for_update(skip_locked=True)
            .filter(key__in=looked)
            .filter(Exists(tasks))  # a task that does not exist (debug.reset) is not judged
            .exclude(Exists(current))
            .values_list("key", flat=True)
        )
        if not keys:
            return 0
        n, _ = due.filter(key__in=keys).exclude(Exists(current)).delete()
    metrics.record_stale_skipped("execute", n)
    return n
