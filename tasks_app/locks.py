"""Named row locks for tasks. A task is guarded by its promise's row lock (same id), so locking a
task means locking that promise row and then reading the task.

The task is read in a second statement on purpose. On PostgreSQL, ``SELECT … FOR UPDATE OF
promise`` joined to ``task`` re-checks only the locked promise row after waiting for a lock; the
joined task columns would still come from the statement's old snapshot (so sixteen racing
acquires would all see version 0). A statement issued after the lock is held sees the latest
committed task.
"""

from __future__ import annotations

from promises.models import Promise

from .models import Task


def task_for_update(task_id: str) -> tuple[Task | None, Promise | None]:
    p = Promise.objects.select_for_update().filter(id=task_id).first()
    if p is None:
        return None, None
    return Task.objects.filter(pk=task_id).first(), p


def tasks_for_update(ids: list[str]) -> dict[str, tuple[Task | None, Promise]]:
    """Lock several task/promise pairs in id order (deadlock-free)."""
    promises = list(
        Promise.objects.select_for_update().filter(id__in=sorted(set(ids))).order_by("id")
    )
    tasks = {t.pk: t for t in Task.objects.filter(pk__in=[p.id for p in promises])}
    return {p.id: (tasks.get(p.id), p) for p in promises}


def task_read(task_id: str) -> tuple[Task | None, Promise | None]:
    p = Promise.objects.select_related("task").filter(id=task_id).first()
    if p is None:
        return None, None
    try:
        return p.task, p
    except Task.DoesNotExist:
        return None, p
