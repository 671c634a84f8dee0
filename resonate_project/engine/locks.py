"""Named row locks, and the one lock order every writer follows.

Lock order: promise rows in ascending id order, and a task only after its own promise (a task
shares its promise's id, so the promise row lock guards both); a schedule row before the
promises it creates. Sweeps claim with ``SKIP LOCKED`` in bounded batches; a drain that would
wait on an awaiter skips it instead (``engine.promise_transitions.resume_callbacks``). On SQLite the
IMMEDIATE transaction already serialises writers and ``select_for_update`` is a no-op.

A task is read in a second statement on purpose (sent in the same round trip as the lock on
PostgreSQL, ``rows.locked_with``). On PostgreSQL, ``SELECT … FOR UPDATE OF
promise`` joined to ``task`` re-checks only the locked promise row after waiting for a lock; the
joined task columns would still come from the statement's old snapshot (so sixteen racing
acquires would all see version 0). A statement issued after the lock is held sees the latest
committed task.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from promises.models import Promise
from resonate_project.engine import rows
from tasks_app.models import Task


def promise_for_update(promise_id: str) -> Promise | None:
    return rows.by_id(Promise, promise_id, for_update=True)


def promises_for_update(ids: Iterable[str]) -> dict[str, Promise]:
    """Lock several promises in id order (deadlock-free) and return those that exist."""
    return {p.id: p for p in rows.by_ids(Promise, sorted(set(ids)), for_update=True)}


def task_for_update(task_id: str) -> tuple[Task | None, Promise | None]:
    return tasks_for_update([task_id]).get(task_id, (None, None))


def tasks_for_update(ids: list[str]) -> dict[str, tuple[Task | None, Promise]]:
    """Lock several task/promise pairs in id order (deadlock-free); the tasks are read after the
    locks are held (one round trip on PostgreSQL: ``rows.locked_with``)."""
    promises, found = rows.locked_with(Promise, sorted(set(ids)), Task)
    tasks = {t.pk: t for t in found}
    return {p.id: (tasks.get(p.id), p) for p in promises}


def task_read(task_id: str) -> tuple[Task | None, Promise | None]:
    p = Promise.objects.select_related("task").filter(id=task_id).first()
    if p is None:
        return None, None
    try:
        return p.task, p
    except Task.DoesNotExist:
        return None, p


def due_tasks_for_update(
    state: str, field: str, now: int, limit: int, *where: Any
) -> list[tuple[Task, Promise]]:
    """Claim the promises of due tasks (SKIP LOCKED), then read their tasks after the locks are
    held and keep those still due (the task is re-read for the reason given above). ``where``:
    further filters on the promises (the step's rows set aside, or one row)."""
    claimed = list(
        Promise.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(*where, **{"task__state": state, f"task__{field}__lte": now})
        .order_by(f"task__{field}")[:limit]
    )
    tasks = {t.pk: t for t in Task.objects.filter(pk__in=[p.id for p in claimed])}
    due = []
    for p in claimed:
        task = tasks.get(p.id)
        deadline = None if task is None else getattr(task, field)
        if task is not None and task.state == state and deadline is not None and deadline <= now:
            due.append((task, p))
    return due
