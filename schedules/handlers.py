"""Schedule handlers S-01 … S-04, one per request kind (spec §4), each ``(request, now)``; a
refusal is raised (``core.errors``) before the first write."""

from __future__ import annotations

from promises.handlers import check_target
from promises.selectors import filter_tags
from resonate_project.core import cron
from resonate_project.core.errors import InvalidRequest, NotFound
from resonate_project.core.protocol import Response, ok
from resonate_project.core.schedules import schedule_record
from resonate_project.core.tags import TARGET, is_timer
from resonate_project.core.wire.promises import check_search_tags, check_tags
from resonate_project.core.wire.schedules import (
    ScheduleCreateReq,
    ScheduleDeleteReq,
    ScheduleGetReq,
    ScheduleSearchReq,
)
from resonate_project.engine import promise_transitions, wake
from resonate_project.engine.search import search
from resonate_project.engine.uow import unit_of_work
from schedules.models import Schedule

SCHEDULE_NOT_FOUND = "schedule not found"


def schedule_get(req: ScheduleGetReq, now: int) -> Response:
    """S-01. The stored record (schedules have no projection)."""
    s = Schedule.objects.filter(id=req.id).first()
    if s is None:
        raise NotFound(SCHEDULE_NOT_FOUND)
    return ok({"schedule": schedule_record(s)})


def check_schedule_create(req: ScheduleCreateReq) -> None:
    """S-02's refusals of the request itself, decided before anything is read or written. The
    admin's form asks this too (with :func:`first_run`), so what an operator types is refused
    exactly as a client's request is."""
    check_tags("promiseTags", req.promise_tags)
    if is_timer(req.promise_tags) and TARGET in req.promise_tags:
        raise InvalidRequest(
            "promiseTags may not make a timer that is also targeted", field="promiseTags"
        )
    check_target("promiseTags", req.promise_tags)
    if not cron.valid(req.cron):
        raise InvalidRequest(
            f"cron is not a valid 5- or 6-field cron expression: {req.cron!r}", field="cron"
        )


def first_run(req: ScheduleCreateReq, now: int) -> int:
    """The first cron instant strictly after ``now``; refused when there is none."""
    try:
        return cron.next_after(req.cron, now)
    except cron.NoNextRun as exc:  # a debug clock near year 9999; refused before any write
        raise InvalidRequest(str(exc), field="cron") from None


def schedule_create(req: ScheduleCreateReq, now: int) -> Response:
    """S-02. Idempotent by id (an existing schedule is returned unchanged); the first run is the
    first cron instant strictly after ``now``."""
    check_schedule_create(req)
    with unit_of_work(now):
        existing = Schedule.objects.select_for_update().filter(id=req.id).first()
        if existing is not None:
            return ok({"schedule": schedule_record(existing)})
        next_run_at = first_run(req, now)
        s = Schedule(
            id=req.id,
            cron=req.cron,
            promise_id=req.promise_id,
            promise_timeout=req.promise_timeout,
            promise_param_headers=req.promise_param.headers,
            promise_param_data=req.promise_param.data,
            promise_tags=req.promise_tags,
            created_at=now,
            next_run_at=next_run_at,
        )
        if promise_transitions.insert(s):
            wake.deadline(s.next_run_at, now)
        else:
            s = Schedule.objects.get(id=req.id)
        return ok({"schedule": schedule_record(s)})


def schedule_delete(req: ScheduleDeleteReq, now: int) -> Response:
    """S-03. Occurrence promises already created are left alone."""
    with unit_of_work(now):
        deleted, _ = Schedule.objects.filter(id=req.id).delete()
        if not deleted:
            raise NotFound(SCHEDULE_NOT_FOUND)
        return ok({})


def schedule_search(req: ScheduleSearchReq, now: int) -> Response:
    """Not in the spec (501 there): filter by exact promise tags, ordered by id, keyset cursor."""
    check_search_tags("tags", req.tags)
    qs = Schedule.objects.all()
    if req.tags:
        qs = filter_tags(qs, "promise_tags", req.tags)
    return ok(
        search(
            qs,
            key="schedules",
            record=schedule_record,
            limit=req.limit,
            cursor=req.cursor,
            id_prefix=req.idPrefix,
        )
    )
