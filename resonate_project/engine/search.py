"""Keyset pagination shared by the three searches: ordered by id, the cursor is the last id
returned, and it is present only when another page may follow.

A page also stops early where its records would pass ``MAX_SEARCH_RESPONSE_BYTES`` (less
``RESPONSE_RESERVE`` for the envelope and the cursor), with a cursor to the rest; a single record
larger than that still comes back alone, so a client always makes progress.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from itertools import islice
from typing import Any

import msgspec
from django.db.models import QuerySet

from resonate_project.core.conf import resonate_settings
from resonate_project.core.errors import InvalidRequest
from resonate_project.engine import scope

# Bytes of a response that are not records: kind, head and a cursor of up to 1024 characters
# (6 bytes each when JSON escapes them). corrId is the client's own and is not counted.
RESPONSE_RESERVE = 8 * 1024
# Rows read from the database at a time: a page never holds more than one batch of rows beyond
# what it returns, however large the rows are.
FETCH_BATCH = 20

Record = Mapping[str, Any]  # a typed record (PromiseRecord, TaskRecord, ScheduleRecord)


def fit(
    rows: Iterable[Any], record: Callable[[Any], Record], budget: int
) -> tuple[list[Any], list[Record], bool]:
    """The leading ``rows`` whose records' JSON fits ``budget`` bytes (at least one), their
    records, and whether a row was left out for size."""
    kept: list[Any] = []
    records: list[Record] = []
    size = 2  # the list's brackets
    for row in rows:
        rec = record(row)
        size += len(msgspec.json.encode(rec)) + (1 if records else 0)
        if records and size > budget:
            return kept, records, True
        kept.append(row)
        records.append(rec)
    return kept, records, False


def search_budget() -> int:
    return resonate_settings().MAX_SEARCH_RESPONSE_BYTES - RESPONSE_RESERVE


def search_page(
    qs: QuerySet[Any], cursor: str | None, limit: int, record: Callable[[Any], Record]
) -> tuple[list[Record], str | None]:
    if cursor:
        qs = qs.filter(pk__gt=cursor)
    rows = qs.order_by("pk")[: limit + 1].iterator(chunk_size=FETCH_BATCH)
    kept, records, cut = fit(islice(rows, limit), record, search_budget())
    more = cut or next(rows, None) is not None
    return records, (str(kept[-1].pk) if more else None)


def search(
    qs: QuerySet[Any],
    *,
    key: str,
    record: Callable[[Any], Record],
    limit: int | None,
    cursor: str | None,
    id_prefix: str | None,
    id_field: str = "pk",
) -> dict[str, Any]:
    """The shared body of the three searches: ``limit`` defaulted and capped, narrowed to the
    caller's ids (``engine.scope``) and to ids under ``id_prefix``, one keyset page of records
    under ``key`` and a ``cursor`` when another page may follow."""
    conf = resonate_settings()
    limit = limit or conf.SEARCH_LIMIT_DEFAULT
    if limit > conf.SEARCH_LIMIT_MAX:
        raise InvalidRequest(f"limit must be at most {conf.SEARCH_LIMIT_MAX}", field="limit")
    qs = scope.prefixed(scope.visible(qs, id_field), id_field, id_prefix)
    records, next_cursor = search_page(qs, cursor, limit, record)
    data: dict[str, Any] = {key: records}
    if next_cursor is not None:
        data["cursor"] = next_cursor
    return data


def check_state(state: str | None, states: tuple[str, ...]) -> None:
    if state is not None and state not in states:
        raise InvalidRequest(f"state must be one of {', '.join(states)}", field="state")
