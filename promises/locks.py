"""Named row locks for promises.

Lock order, everywhere: promise rows in ascending id order, and a task only after its own promise
(a task shares its promise's id, so the promise row lock guards both). On SQLite the IMMEDIATE
transaction already serialises writers and ``select_for_update`` is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable

from .models import Promise


def promise_for_update(promise_id: str) -> Promise | None:
    return Promise.objects.select_for_update().filter(id=promise_id).first()


def promises_for_update(ids: Iterable[str]) -> dict[str, Promise]:
    """Lock several promises in id order (deadlock-free) and return those that exist."""
    wanted = sorted(set(ids))
    rows = Promise.objects.select_for_update().filter(id__in=wanted).order_by("id")
    return {p.id: p for p in rows}
