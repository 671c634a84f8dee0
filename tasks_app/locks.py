"""Named row locks for tasks. A task is guarded by its promise's row lock (same id), so locking a
task means locking that promise row and reading the task beside it."""

from __future__ import annotations

from promises.models import Promise

from .models import Task


def _task_of(p: Promise) -> Task | None:
    try:
        return p.task
    except Task.DoesNotExist:
        return None


def task_for_update(task_id: str) -> tuple[Task | None, Promise | None]:
    p = (
        Promise.objects.select_for_update(of=("self",))
        .select_related("task")
        .filter(id=task_id)
        .first()
    )
    if p is None:
        return None, None
    return _task_of(p), p


def tasks_for_update(ids: list[str]) -> dict[str, tuple[Task | None, Promise]]:
    """Lock several task/promise pairs in id order (deadlock-free)."""
    rows = (
        Promise.objects.select_for_update(of=("self",))
        .select_related("task")
        .filter(id__in=sorted(set(ids)))
        .order_by("id")
    )
    return {p.id: (_task_of(p), p) for p in rows}


def task_read(task_id: str) -> tuple[Task | None, Promise | None]:
    p = Promise.objects.select_related("task").filter(id=task_id).first()
    if p is None:
        return None, None
    return _task_of(p), p
