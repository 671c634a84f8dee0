"""The Python API for schedules: one typed function per protocol kind, keyword-only, with
``now`` passed in, plus the operator's "fire now". A refusal raises a
``core.errors.ProtocolError`` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from django.db import transaction

from promises.models import Promise
from promises.services import ValueArg, value_fields
from resonate_project.core.cron import NoNextRun, next_after
from resonate_project.core.errors import NotFound
from resonate_project.core.protocol import Page, PromiseRecord, ScheduleRecord, promise_record
from resonate_project.core.schedules import expand
from resonate_project.core.wire import checked
from resonate_project.core.wire.schedules import (
    ScheduleCreateReq,
    ScheduleDeleteReq,
    ScheduleGetReq,
    ScheduleSearchReq,
)
from resonate_project.engine.steps import occur
from resonate_project.engine.uow import unit_of_work
from schedules import handlers
from schedules.models import Schedule


def _create_req(
    id: str,
    cron: str,
    promise_id: str,
    promise_timeout: int,
    promise_param: ValueArg,
    promise_tags: Mapping[str, str] | None,
) -> ScheduleCreateReq:
    """The S-02 request a create, a preview and an edit all check (400s naming the field)."""
    return checked(
        ScheduleCreateReq,
        id=id,
        cron=cron,
        promiseId=promise_id,
        promiseTimeout=promise_timeout,
        promiseParam=value_fields(promise_param),
        promiseTags=dict(promise_tags or {}),
    )


def schedule_get(*, id: str, now: int) -> ScheduleRecord:
    """S-01: the stored schedule (``NotFound`` if absent)."""
    res = handlers.schedule_get(checked(ScheduleGetReq, id=id), now)
    return cast(ScheduleRecord, res.data["schedule"])


def schedule_create(
    *,
    id: str,
    cron: str,
    promise_id: str,
    promise_timeout: int,
    now: int,
    promise_param: ValueArg = None,
    promise_tags: Mapping[str, str] | None = None,
) -> ScheduleRecord:
    """S-02, idempotent by id: every cron instant creates a promise ``promise_id`` (``{{.id}}``
    and ``{{.timestamp}}`` expand) with ``promise_timeout`` ms to settle."""
    req = _create_req(id, cron, promise_id, promise_timeout, promise_param, promise_tags)
    return cast(ScheduleRecord, handlers.schedule_create(req, now).data["schedule"])


def schedule_preview(
    *,
    id: str,
    cron: str,
    promise_id: str,
    promise_timeout: int,
    now: int,
    count: int,
    promise_param: ValueArg = None,
    promise_tags: Mapping[str, str] | None = None,
) -> list[int]:
    """What ``schedule_create`` would refuse, refused the same way (``ProtocolError`` naming the
    field), else the first ``count`` fire times it would have from ``now``. Writes nothing."""
    req = _create_req(id, cron, promise_id, promise_timeout, promise_param, promise_tags)
    handlers.check_schedule_create(req)
    times = [handlers.first_run(req, now)]
    while len(times) < count:
        try:
            times.append(next_after(req.cron, times[-1]))
        except NoNextRun:  # none before the end of year 9999
            break
    return times


def schedule_replace(
    *,
    id: str,
    cron: str,
    promise_id: str,
    promise_timeout: int,
    now: int,
    promise_param: ValueArg = None,
    promise_tags: Mapping[str, str] | None = None,
) -> ScheduleRecord:
    """An operator's edit: S-03 then S-02 in one transaction, so the schedule is never missing
    and a refused create leaves the old one as it was. The next run is the first instant of the
    new cron after ``now``; occurrences already created are left alone (``NotFound`` if the
    schedule is gone)."""
    req = _create_req(id, cron, promise_id, promise_timeout, promise_param, promise_tags)
    handlers.check_schedule_create(req)
    handlers.first_run(req, now)
    with transaction.atomic():
        handlers.schedule_delete(checked(ScheduleDeleteReq, id=id), now)
        return cast(ScheduleRecord, handlers.schedule_create(req, now).data["schedule"])


def schedule_delete(*, id: str, now: int) -> None:
    """S-03: occurrences already created are left alone."""
    handlers.schedule_delete(checked(ScheduleDeleteReq, id=id), now)


def schedule_search(
    *,
    now: int,
    tags: Mapping[str, str] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    id_prefix: str | None = None,
) -> Page[ScheduleRecord]:
    """Schedules by exact promise tags, in id order, one page at a time."""
    req = checked(
        ScheduleSearchReq,
        tags=None if tags is None else dict(tags),
        limit=limit,
        cursor=cursor,
        idPrefix=id_prefix,
    )
    data = handlers.schedule_search(req, now).data
    return Page(data["schedules"], data.get("cursor"))


def fire_now(*, id: str, now: int) -> tuple[PromiseRecord, bool]:
    """One extra occurrence at instant ``now``, created exactly as the schedule step creates one
    (create-if-absent, ``createdAt = now``, the occurrence tags, its task dispatched); returns it
    and whether this call created it (False when the expanded id existed already: a template
    without ``{{.timestamp}}``, or a second fire in the same millisecond). Sets ``last_run_at``
    as the step does and leaves ``next_run_at`` alone, so the cadence is unchanged. Locks the
    schedule row first, then creates the promise: the order the schedule step uses."""
    with unit_of_work(now) as fx:
        s = Schedule.objects.select_for_update().filter(id=id).first()
        if s is None:
            raise NotFound(handlers.SCHEDULE_NOT_FOUND)
        promise_id = expand(s.promise_id, s.id, now)
        existed = Promise.objects.filter(id=promise_id).exists()
        occur(s, now, fx)
        s.last_run_at = now
        s.save(update_fields=["last_run_at"])
        p = Promise.objects.get(id=promise_id)
        return promise_record(p, now), not existed
