"""Task handlers T-01 … T-11, one per request kind (spec §4), each ``(request, now)``; a refusal
is raised (``core.errors``) before the first write.

"The fence block" is the spec's ordered refusal list shared by acquire, fence, suspend, fulfill
and release: task absent 404, its promise absent 409, viewed state wrong 409, promise not live
409, version mismatch 409 (state before version).
"""

from __future__ import annotations

import promises.handlers
from promises.models import Callback, Promise, PromiseState
from resonate_project.core.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    ProtocolError,
    Unprocessable,
)
from resonate_project.core.protocol import (
    PROTOCOL_VERSION,
    PromiseRecord,
    Response,
    is_live,
    ok,
    promise_record,
    task_record,
    viewed_task_state,
)
from resonate_project.core.tags import TARGET, is_timer
from resonate_project.core.wire.promises import CreateAction, check_tags
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
from resonate_project.engine.locks import task_for_update, task_read, tasks_for_update
from resonate_project.engine.search import check_state, search
from resonate_project.engine.uow import unit_of_work
from tasks_app.models import Task, TaskState
from tasks_app.selectors import (
    TASK_STATES,
    preload,
    suspend_preload,
    tasks,
)

TASK_NOT_FOUND = "task not found"


def check_fence(t: Task, p: Promise, version: int, now: int, expected: str = "acquired") -> None:
    """The block after "task absent → 404". Its second entry (task present, promise absent → 409)
    cannot arise here: a task row references its promise, which is never deleted."""
    if viewed_task_state(t, p, now) != expected:
        raise Conflict(f"task is not {expected}")
    if not is_live(p, now):
        raise Conflict("task's promise is not pending")
    if t.version != version:
        raise Conflict(f"version mismatch: the task is at version {t.version}", field="version")


def claim(t: Task, p: Promise, now: int) -> Response:
    return ok(
        {
            "task": task_record(t, p, now),
            "promise": promise_record(p, now),
            "preload": preload(p, now),
        }
    )


def task_get(req: TaskGetReq, now: int) -> Response:
    """T-01. The task as viewed now: fulfilled once its promise is logically settled."""
    t, p = task_read(req.id)
    if t is None or p is None:
        raise NotFound(TASK_NOT_FOUND)
    return ok({"task": task_record(t, p, now)})


def task_create(req: TaskCreateReq, now: int) -> Response:
    """T-02. Create a targeted promise with its task already acquired by the caller, or re-acquire
    the existing task if it is pending; 409 if someone holds it (even the same pid)."""
    action = req.action.data
    check_tags("action.data.tags", action.tags)
    if TARGET not in action.tags:
        raise InvalidRequest(
            "action.data.tags must contain resonate:target", field="action.data.tags"
        )
    if is_timer(action.tags):
        raise InvalidRequest(
            "a resonate:timer promise may not carry resonate:target in task.create",
            field="action.data.tags",
        )
    promises.handlers.check_target("action.data.tags", action.tags)
    with unit_of_work(now):
        born = promise_transitions.new_promise(action, now)
        if promise_transitions.insert(born):  # the common case first: one statement
            if born.state == PromiseState.PENDING:
                new_task = task_transitions.born_acquired(born, req.pid, req.ttl, now)
            else:
                new_task = task_transitions.born_fulfilled(born)
            return ok(
                {
                    "task": task_record(new_task, born, now),
                    "promise": promise_record(born, now),
                    "preload": [],
                }
            )
        t, p = task_for_update(action.id)
        if p is None:  # cannot happen: promises are never deleted (but debug.reset)
            raise Conflict("promise was deleted concurrently")
        if p.target is None:
            raise Unprocessable("promise exists and has no resonate:target")
        if t is None:
            raise Conflict("promise has no task")
        state = viewed_task_state(t, p, now)
        if state == TaskState.FULFILLED:
            return ok(
                {"task": task_record(t, p, now), "promise": promise_record(p, now), "preload": []}
            )
        if state != TaskState.PENDING:
            raise Conflict(f"task is {state}")
        task_transitions.acquire(t, req.pid, req.ttl, now)
        return claim(t, p, now)


def task_acquire(req: TaskAcquireReq, now: int) -> Response:
    """T-03. Exclusive per version: the version goes up by one and the caller holds the lease."""
    with unit_of_work(now):
        t, p = task_for_update(req.id)
        if t is None or p is None:
            raise NotFound(TASK_NOT_FOUND)
        check_fence(t, p, req.version, now, expected=TaskState.PENDING)
        task_transitions.acquire(t, req.pid, req.ttl, now)
        return claim(t, p, now)


def task_fence(req: TaskFenceReq, now: int) -> Response:
    """T-04. Run a promise.create or promise.settle only while the caller holds the task at this
    version; guard and inner write commit together. The inner outcome (even 400/404) is wrapped
    in a 200."""
    action = req.action
    check_fence_request(req)
    with unit_of_work(now) as fx:
        locked = tasks_for_update([req.id, action.data.id])
        t, p = locked.get(req.id, (None, None))
        if t is None or p is None:
            raise NotFound(TASK_NOT_FOUND)
        check_fence(t, p, req.version, now)
        target_task, target = locked.get(action.data.id, (None, None))
        try:  # the inner refusals come before its first write, so catching them is safe
            if isinstance(action, CreateAction):
                inner = promises.handlers.create(action.data, now, fx, locked=target)
            else:
                promises.handlers.check_settable(action.data.state)
                inner = promises.handlers.settle(
                    action.data.id,
                    action.data.state,
                    action.data.value,
                    now,
                    fx,
                    locked=target,
                    task=target_task,
                )
        except ProtocolError as refused:
            inner = Response(refused.status, refused.message)
        return fenced(req, inner, preload(p, now))


def check_fence_request(req: TaskFenceReq) -> None:
    """T-04's refusals decided on the request alone (400)."""
    if isinstance(req.action, CreateAction):
        check_tags("action.data.tags", req.action.data.tags)
    if req.action.data.id == req.id:
        raise InvalidRequest(
            "action.data.id must differ from id: a task may not fence its own promise "
            "(use task.fulfill)",
            field="action.data.id",
        )


def fenced(req: TaskFenceReq, inner: Response, records: list[PromiseRecord]) -> Response:
    """T-04's answer: the inner outcome wrapped as its own envelope, and the preload."""
    head = {
        "corrId": str(req.action.head.get("corrId", "")),
        "status": inner.status,
        "version": PROTOCOL_VERSION,
    }
    kind = "promise.create" if isinstance(req.action, CreateAction) else "promise.settle"
    return ok({"action": {"kind": kind, "head": head, "data": inner.data}, "preload": records})


def task_heartbeat(req: TaskHeartbeatReq, now: int) -> Response:
    """T-05. Extend exactly the named leases held by ``pid`` at those versions whose promise is
    live (C7); everything else is skipped silently. Always 200."""
    if not req.tasks:
        return ok({})
    with unit_of_work(now):
        locked = tasks_for_update([ref.id for ref in req.tasks])
        for ref in req.tasks:
            t, p = locked.get(ref.id, (None, None))
            if t is None or p is None:
                continue
            if (
                viewed_task_state(t, p, now) == TaskState.ACQUIRED
                and t.version == ref.version
                and t.pid == req.pid
                and is_live(p, now)
            ):
                task_transitions.extend_lease(t, now)
        return ok({})


def task_suspend(req: TaskSuspendReq, now: int) -> Response:
    """T-06. Park the task on the awaited promises, or answer 300 if any is already settled
    (keep running; nothing is registered)."""
    awaited = [a.data.awaited for a in req.actions]
    if not awaited:
        raise InvalidRequest("actions must not be empty", field="actions")
    if req.id in awaited:
        raise InvalidRequest(
            "actions[].data.awaited must not be the task's own id", field="actions"
        )
    if len(set(awaited)) != len(awaited):
        raise InvalidRequest("actions[].data.awaited names the same promise twice", field="actions")
    with unit_of_work(now):
        locked = tasks_for_update([req.id, *awaited])
        t, p = locked.get(req.id, (None, None))
        if t is None or p is None:
            raise NotFound(TASK_NOT_FOUND)
        check_fence(t, p, req.version, now)
        targets = []
        for awaited_id in awaited:
            pair = locked.get(awaited_id)
            if pair is None:
                raise Unprocessable(f"awaited promise {awaited_id!r} not found", field="actions")
            if not pair[1].external:
                raise Unprocessable(f"awaited promise {awaited_id!r} is internal", field="actions")
            targets.append(pair[1])
        settled = [a for a in targets if not is_live(a, now)]
        if settled:
            if t.resumes:
                t.resumes = []
                t.save(update_fields=["resumes"])
            return Response(300, {"preload": suspend_preload(p, settled, now)})
        Callback.objects.bulk_create(
            [Callback(awaited=a, awaiter=p) for a in targets], ignore_conflicts=True
        )
        task_transitions.suspend(t)
        return ok({})


def task_fulfill(req: TaskFulfillReq, now: int) -> Response:
    """T-07. Settle the task's own promise (``action.data.id`` is not consulted) and fulfil it."""
    data = req.action.data
    promises.handlers.check_settable(data.state)
    with unit_of_work(now) as fx:
        t, p = task_for_update(req.id)
        if t is None or p is None:
            raise NotFound(TASK_NOT_FOUND)
        check_fence(t, p, req.version, now)
        promise_transitions.settle(p, data.state, data.value, now, fx, task=t)
        return ok({"promise": promise_record(p, now)})


def task_release(req: TaskReleaseReq, now: int) -> Response:
    """T-08. Back to pending (resumes kept), due for dispatch at once, or after the back-off of
    a task released again and again without progress (``task_transitions.release``)."""
    with unit_of_work(now) as fx:
        t, p = task_for_update(req.id)
        if t is None or p is None:
            raise NotFound(TASK_NOT_FOUND)
        check_fence(t, p, req.version, now)
        task_transitions.release(t, p, now, fx)
        return ok({})


def task_halt(req: TaskHaltReq, now: int) -> Response:
    """T-09. Take a task out of circulation; 409 once it is (viewed) fulfilled (C4)."""
    with unit_of_work(now):
        t, p = task_for_update(req.id)
        if t is None or p is None:
            raise NotFound(TASK_NOT_FOUND)
        state = viewed_task_state(t, p, now)
        if state == TaskState.FULFILLED:
            raise Conflict("task is fulfilled")
        if state != TaskState.HALTED:
            task_transitions.halt(t)
        return ok({})


def task_continue(req: TaskContinueReq, now: int) -> Response:
    """T-10. A halted task goes back to pending and is dispatched (gated on its promise, C4)."""
    with unit_of_work(now) as fx:
        t, p = task_for_update(req.id)
        if t is None:
            raise NotFound(TASK_NOT_FOUND)
        if p is None:
            raise NotFound("task's promise not found")
        if viewed_task_state(t, p, now) != TaskState.HALTED:
            raise Conflict("task is not halted")
        if not is_live(p, now):
            raise Conflict("task's promise is not pending")
        task_transitions.make_pending(t, p, now, fx, progress=True)
        return ok({})


def task_search(req: TaskSearchReq, now: int) -> Response:
    """Not in the spec (501 there); like the reference server: filter by viewed state, ordered by
    id, keyset cursor."""
    check_state(req.state, TASK_STATES)
    return ok(
        search(
            tasks(req.state, now=now),
            key="tasks",
            record=lambda t: task_record(t, t.promise, now),
            limit=req.limit,
            cursor=req.cursor,
            id_prefix=req.idPrefix,
            id_field="promise__id",
        )
    )
