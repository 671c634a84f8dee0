"""Keyset pagination shared by the three searches: ordered by id, the cursor is the last id
returned, and it is present only when another page may follow."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet


def search_page(qs: QuerySet[Any], cursor: str | None, limit: int) -> tuple[list[Any], str | None]:
    if cursor:
        qs = qs.filter(pk__gt=cursor)
    rows = list(qs.order_by("pk")[: limit + 1])
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, str(rows[-1].pk)
    return rows, None
