"""The Python API for tasks: one typed function per protocol kind, keyword-only, with ``now``
passed in, plus the operator's "expire lease now". Each validates its arguments as the envelope
does, runs in one unit of work, and returns what the wire would carry; a refusal raises a
``core.errors.ProtocolError`` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from promises.services import ValueArg, value_fields
from resonate_project.core.errors import Conflict, NotFound
from resonate_project.core.protocol import (
    Claim,
    Page,
    PromiseRecord,
    TaskRecord,
    promise_record,
    task_record,
)
from resonate_project.core.wire import checked
from resonate_project.core.wire.promises import CreateAction, SettleAction
from resonate_project.core.wire.tasks import (
    TaskAcquireReq,
    TaskContinueReq,
    TaskCreateReq,
    TaskFenceReq,
    TaskFulfillReq,
    TaskGetReq,
    TaskHaltReq,
    TaskHeartbeatReq,
    TaskReleaseReq,
    TaskSearchReq,
    TaskSuspendReq,
)
from resonate_project.engine import promise_transitions, task_transitions
from resonate_project.engine.locks import task_for_update
from resonate_project.engine.uow import unit_of_work
from tasks_app import handlers
from tasks_app.models import TaskState


def task_get(*, id: str, now: int) -> TaskRecord:
    """T-01: the task as viewed at ``now`` (fulfilled once its promise is settled)."""
    return cast(TaskRecord, handlers.task_get(checked(TaskGetReq, id=id), now).data["task"])


def task_create(
    *,
    pid: str,
    ttl: int,
    id: str,
    timeout_at: int,
    tags: Mapping[str, str],
    now: int,
    param: ValueArg = None,
) -> Claim:
    """T-02: create a targeted promise (``tags`` carries ``resonate:target``) with its task
    already acquired by ``pid`` for ``ttl`` ms, or acquire the existing pending one."""
    data = {"id": id, "timeoutAt": timeout_at, "param": value_fields(param), "tags": dict(tags)}
    req = checked(TaskCreateReq, pid=pid, ttl=ttl, action={"kind": "promise.create", "data": data})
    return cast(Claim, handlers.task_create(req, now).data)


def task_acquire(*, id: str, version: int, pid: str, ttl: int, now: int) -> Claim:
    """T-03: take the lease of a pending task at ``version``; the version goes up by one."""
    req = checked(TaskAcquireReq, id=id, version=version, pid=pid, ttl=ttl)
    return cast(Claim, handlers.task_acquire(req, now).data)


def task_fence(
    *, id: str, version: int, action: CreateAction | SettleAction, now: int
) -> dict[str, Any]:
    """T-04: run ``action`` (a promise.create or promise.settle) only while holding the task at
    ``version``; returns ``{"action": <its reply envelope>, "preload": [...]}``."""
    req = checked(TaskFenceReq, id=id, version=version, action=action)
    return cast(dict[str, Any], handlers.task_fence(req, now).data)


def task_heartbeat(*, pid: str, tasks: Iterable[tuple[str, int]], now: int) -> None:
    """T-05: extend the leases ``pid`` holds on these ``(id, version)`` tasks (others skipped)."""
    refs = [{"id": task_id, "version": version} for task_id, version in tasks]
    handlers.task_heartbeat(checked(TaskHeartbeatReq, pid=pid, tasks=refs), now)


def task_suspend(
    *, id: str, version: int, awaited: Iterable[str], now: int
) -> list[PromiseRecord] | None:
    """T-06: park the task until one of ``awaited`` settles (None), or, if one already has, keep
    running: the preload to continue with (the wire's 300)."""
    actions = [
        {"kind": "promise.register_callback", "data": {"awaited": a, "awaiter": id}}
        for a in awaited
    ]
    res = handlers.task_suspend(
        checked(TaskSuspendReq, id=id, version=version, actions=actions), now
    )
    return None if res.status == 200 else cast(list[PromiseRecord], res.data["preload"])


def task_fulfill(
    *, id: str, version: int, state: str, now: int, value: ValueArg = None
) -> PromiseRecord:
    """T-07: settle the task's own promise with ``state`` and fulfil the task."""
    data = {"id": id, "state": state, "value": value_fields(value)}
    req = checked(
        TaskFulfillReq, id=id, version=version, action={"kind": "promise.settle", "data": data}
    )
    return cast(PromiseRecord, handlers.task_fulfill(req, now).data["promise"])


def task_release(*, id: str, version: int, now: int) -> None:
    """T-08: give the lease back; the task is pending and dispatched again."""
    handlers.task_release(checked(TaskReleaseReq, id=id, version=version), now)


def task_halt(*, id: str, now: int) -> None:
    """T-09: take the task out of circulation (``Conflict`` once it is fulfilled)."""
    handlers.task_halt(checked(TaskHaltReq, id=id), now)


def task_continue(*, id: str, now: int) -> None:
    """T-10: a halted task with a live promise goes back to pending and is dispatched."""
    handlers.task_continue(checked(TaskContinueReq, id=id), now)


def task_search(
    *,
    now: int,
    state: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    id_prefix: str | None = None,
) -> Page[TaskRecord]:
    """Tasks by viewed state, in id order, one page at a time."""
    req = checked(TaskSearchReq, state=state, limit=limit, cursor=cursor, idPrefix=id_prefix)
    data = handlers.task_search(req, now).data
    return Page(data["tasks"], data.get("cursor"))


def expire_lease(*, id: str, now: int) -> tuple[TaskRecord, PromiseRecord]:
    """R5 (lease expiry) for one task now, whatever its lease deadline (the admin's "expire lease
    now").

    A live task goes back to pending at the same version and is dispatched again; the holder's
    next request carries a version that is no longer acquired (and, once someone else acquires,
    a lower one), so every fence refuses it. A task whose promise is past its deadline is timed
    out instead (C5), which fulfils it. ``Conflict`` unless the task is stored acquired.
    """
    with unit_of_work(now) as fx:
        t, p = task_for_update(id)
        if t is None or p is None:
            raise NotFound(handlers.TASK_NOT_FOUND)
        if t.state != TaskState.ACQUIRED:
            raise Conflict(f"task is {t.state}, not acquired")
        if promise_transitions.live_or_time_out(p, now, fx):
            task_transitions.make_pending(t, p, now, fx)
        return (
            task_record(t, p, now),
            promise_record(p, now),
        )
