"""Schedule handlers S-01 … S-04, one per request kind (spec §4), each ``(request, now)``."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from promises.handlers import check_target, filter_tags
from resonate_project.core import cron
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import Response, bad_request, fail, ok
from resonate_project.core.schedules import schedule_record
from resonate_project.core.tags import TARGET, is_timer
from resonate_project.core.wire.promises import check_search_tags, check_tags
from resonate_project.core.wire.schedules import (
    ScheduleCreateReq,
    ScheduleDeleteReq,
    ScheduleGetReq,
    ScheduleSearchReq,
)
from resonate_project.engine import promises as services
from resonate_project.engine.search import search_page
from schedules.models import Schedule

SCHEDULE_NOT_FOUND = "schedule not found"


def schedule_get(req: ScheduleGetReq, now: int) -> Response:
    """S-01. The stored record (schedules have no projection)."""
    s = Schedule.objects.filter(id=req.id).first()
    if s is None:
        return fail(404, SCHEDULE_NOT_FOUND)
    return ok({"schedule": schedule_record(s)})


def schedule_create(req: ScheduleCreateReq, now: int) -> Response:
    """S-02. Idempotent by id (an existing schedule is returned unchanged); the first run is the
    first cron instant strictly after ``now``."""
    if refusal := check_tags("promiseTags", req.promise_tags):
        return refusal
    if is_timer(req.promise_tags) and TARGET in req.promise_tags:
        return bad_request("promiseTags may not make a timer that is also targeted")
    if refusal := check_target("promiseTags", req.promise_tags):
        return refusal
    if not cron.valid(req.cron):
        return bad_request(f"cron is not a valid 5- or 6-field cron expression: {req.cron!r}")
    with transaction.atomic():
        existing = Schedule.objects.select_for_update().filter(id=req.id).first()
        if existing is not None:
            return ok({"schedule": schedule_record(existing)})
        s = Schedule(
            id=req.id,
            cron=req.cron,
            promise_id=req.promise_id,
            promise_timeout=req.promise_timeout,
            promise_param_headers=req.promise_param.headers,
            promise_param_data=req.promise_param.data,
            promise_tags=req.promise_tags,
            created_at=now,
            next_run_at=cron.next_after(req.cron, now),
        )
        if not services.insert(s):
            s = Schedule.objects.get(id=req.id)
        return ok({"schedule": schedule_record(s)})


def schedule_delete(req: ScheduleDeleteReq, now: int) -> Response:
    """S-03. Occurrence promises already created are left alone."""
    with transaction.atomic():
        deleted, _ = Schedule.objects.filter(id=req.id).delete()
        if not deleted:
            return fail(404, SCHEDULE_NOT_FOUND)
        return ok({})


def schedule_search(req: ScheduleSearchReq, now: int) -> Response:
    """Not in the spec (501 there): filter by exact promise tags, ordered by id, keyset cursor."""
    if refusal := check_search_tags("tags", req.tags):
        return refusal
    conf = resonate_settings()
    limit = req.limit or conf.SEARCH_LIMIT_DEFAULT
    if limit > conf.SEARCH_LIMIT_MAX:
        return bad_request(f"limit must be at most {conf.SEARCH_LIMIT_MAX}")
    qs = Schedule.objects.all()
    if req.tags:
        qs = filter_tags(qs, "promise_tags", req.tags)
    if req.idPrefix:
        qs = qs.filter(pk__startswith=req.idPrefix)
    records, cursor = search_page(qs, req.cursor, limit, schedule_record)
    data: dict[str, Any] = {"schedules": records}
    if cursor is not None:
        data["cursor"] = cursor
    return ok(data)
