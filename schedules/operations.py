"""Operator operations on schedules (the admin's "fire now").

Each is one transaction with ``now`` passed in, locking the schedule row first and then creating
promises, the order the schedule step uses.
"""

from __future__ import annotations

from promises.models import Promise
from resonate_project.core.protocol import Response, fail, ok, promise_record
from resonate_project.core.schedules import expand
from resonate_project.engine.steps import occur
from resonate_project.engine.uow import unit_of_work
from schedules.handlers import SCHEDULE_NOT_FOUND
from schedules.models import Schedule


def fire_now(schedule_id: str, now: int) -> Response:
    """One extra occurrence at instant ``now``, created exactly as the schedule step creates one
    (create-if-absent, ``createdAt = now``, the occurrence tags, its task dispatched). Sets
    ``last_run_at`` as the step does and leaves ``next_run_at`` alone, so the regular cadence
    is unchanged. ``data.created`` is False when the expanded id already existed (a template
    without ``{{.timestamp}}``, or a second fire in the same millisecond)."""
    with unit_of_work(now) as fx:
        s = Schedule.objects.select_for_update().filter(id=schedule_id).first()
        if s is None:
            return fail(404, SCHEDULE_NOT_FOUND)
        promise_id = expand(s.promise_id, s.id, now)
        existed = Promise.objects.filter(id=promise_id).exists()
        occur(s, now, fx)
        s.last_run_at = now
        s.save(update_fields=["last_run_at"])
        p = Promise.objects.get(id=promise_id)
        return ok({"promise": promise_record(p, now), "created": not existed})
