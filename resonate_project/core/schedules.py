"""Schedule records and occurrence ids."""

from __future__ import annotations

from typing import TYPE_CHECKING

from resonate_project.core.protocol import ScheduleRecord, value_json

if TYPE_CHECKING:
    from schedules.models import Schedule


def schedule_record(s: Schedule) -> ScheduleRecord:
    record: ScheduleRecord = {
        "id": s.id,
        "cron": s.cron,
        "promiseId": s.promise_id,
        "promiseTimeout": s.promise_timeout,
        "promiseParam": value_json(s.promise_param_headers, s.promise_param_data),
        "promiseTags": s.promise_tags,
        "createdAt": s.created_at,
        "nextRunAt": s.next_run_at,
    }
    if s.last_run_at is not None:
        record["lastRunAt"] = s.last_run_at
    return record


def expand(template: str, schedule_id: str, instant_ms: int) -> str:
    """The occurrence promise id: ``{{.id}}`` is the schedule id, ``{{.timestamp}}`` the
    occurrence instant in ms (as the reference server)."""
    return template.replace("{{.id}}", schedule_id).replace("{{.timestamp}}", str(instant_ms))
