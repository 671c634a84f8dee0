"""Read queries over tasks: the viewed-state filter (fact T) and the preload a claim carries.
Each takes ``now`` when the projection needs it, locks nothing and writes nothing."""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from promises.models import Promise
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import PENDING, PromiseRecord, promise_record
from resonate_project.core.protocol import TASK_STATES as TASK_STATES
from resonate_project.engine import rows
from tasks_app.models import Task, TaskState


def viewed_state_q(state: str, now: int) -> Q:
    """Tasks whose viewed state (fact T) is ``state`` at ``now`` (C8 holds for searches too)."""
    live = Q(promise__state=PENDING, promise__timeout_at__gt=now)
    if state == TaskState.FULFILLED:
        return Q(state=TaskState.FULFILLED) | ~live
    return live & Q(state=state)


def tasks(state: str | None = None, *, now: int) -> QuerySet[Task]:
    """Tasks (with their promise) by viewed state, unordered."""
    qs = Task.objects.select_related("promise")
    if state is not None:
        qs = qs.filter(viewed_state_q(state, now))
    return qs


def preload(p: Promise, now: int) -> list[PromiseRecord]:
    """Promises of the same ``resonate:branch`` as the task's promise, itself excluded, so the SDK
    can replay without fetching each one (as the reference server fills it)."""
    if p.branch is None:
        return []
    limit = resonate_settings().PRELOAD_LIMIT
    found = rows.by_column(Promise, "branch", p.branch, exclude_id=p.id, limit=limit)
    return [promise_record(row, now) for row in found]


def suspend_preload(p: Promise, settled: list[Promise], now: int) -> list[PromiseRecord]:
    """The branch preload plus the settled awaited promises, which the SDK re-runs with."""
    records = preload(p, now)
    seen = {r["id"] for r in records}
    records.extend(promise_record(a, now) for a in settled if a.id not in seen)
    return records


def release_fields(t: Task) -> dict[str, Any]:
    """What the resource API adds to a task record (not on the wire): its releases since the
    last progress (``releases``; from the second on they delay its next execute), the last one
    (``lastReleaseAt``) and the process that acquired it last (``lastPid``)."""
    out: dict[str, Any] = {"releases": t.release_count}
    if t.last_release_at is not None:
        out["lastReleaseAt"] = t.last_release_at
    if t.last_pid is not None:
        out["lastPid"] = t.last_pid
    return out


def task_release_fields(id: str) -> dict[str, Any]:
    """:func:`release_fields` of the task ``id`` ({} if there is none)."""
    t = Task.objects.filter(pk=id).only("release_count", "last_release_at", "last_pid").first()
    return {} if t is None else release_fields(t)
