"""Keyed outbox upserts (spec §1.4 ``setMessage``), run inside the caller's transaction.

``execute`` is keyed by task id, so a newer execute replaces an undelivered older one (the later
version wins); ``unblock`` by ``<promise id>:notify:<address>``. Each upsert bumps ``revision`` and
resets the delivery bookkeeping (a dead letter replaced this way is live again), and asks for a
drain once the transaction commits.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection

from outbox.models import Message
from resonate_project.core.addresses import is_push, poll_route
from resonate_project.engine import wake
from resonate_project.observability import metrics

_TABLE = Message._meta.db_table
_SQL = """
INSERT INTO {table} (key, kind, address, task_id, version, promise, created_at, revision,
                     attempts, next_attempt_at, last_error, poll_route)
VALUES (%s, %s, %s, %s, %s, {json}, %s, 1, 0, %s, '', %s)
ON CONFLICT (key) DO UPDATE SET
    kind = excluded.kind, address = excluded.address, task_id = excluded.task_id,
    version = excluded.version, promise = excluded.promise, created_at = excluded.created_at,
    revision = {table}.revision + 1, attempts = 0, next_attempt_at = excluded.next_attempt_at,
    last_error = '', poll_route = excluded.poll_route, dead_at = NULL
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
