"""Operator operations on tasks that are not protocol requests (the admin's "expire lease now").

Each is one transaction with ``now`` passed in, taking the same locks as the handlers and steps
(``tasks_app/locks.py``), so it keeps the guarantees those keep.
"""

from __future__ import annotations

from resonate_project.core.protocol import Response, fail, ok, promise_record, task_record
from resonate_project.engine import promises as services
from resonate_project.engine import tasks as transitions
from resonate_project.engine.locks import task_for_update
from resonate_project.engine.uow import unit_of_work
from tasks_app.handlers import TASK_NOT_FOUND
from tasks_app.models import TaskState


def expire_lease(task_id: str, now: int) -> Response:
    """R5 (lease expiry) for one task now, whatever its lease deadline.

    A live task goes back to pending at the same version and is dispatched again; the holder's
    next request carries a version that is no longer acquired (and, once someone else acquires,
    a lower one), so every fence refuses it. A task whose promise is past its deadline is timed
    out instead (C5), which fulfils it. 409 unless the task is stored acquired.
    """
    with unit_of_work(now) as fx:
        t, p = task_for_update(task_id)
        if t is None or p is None:
            return fail(404, TASK_NOT_FOUND)
        if t.state != TaskState.ACQUIRED:
            return fail(409, f"task is {t.state}, not acquired")
        if services.live_or_time_out(p, now, fx):
            transitions.make_pending(t, p, now, fx)
        return ok({"task": task_record(t, p, now), "promise": promise_record(p, now)})
