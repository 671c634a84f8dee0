"""R7 schedule fire with catch-up (spec §5.6)."""

from __future__ import annotations

from django.db import transaction

from promises import services
from promises.conf import resonate_settings
from promises.effects import Effects, finish
from promises.requests import PromiseCreateReq, Value, later
from promises.tags import BRANCH, SCHEDULE
from resonate_project.observability import metrics

from . import cron
from .models import Schedule
from .protocol import expand


def schedule_fire(now: int, limit: int) -> int:
    """Create every occurrence due in ``[nextRunAt, now]``, each as if at its own instant, up to
    ``SCHEDULE_CATCHUP_BATCH`` per schedule per call; returns the occurrences fired."""
    per_schedule = resonate_settings().SCHEDULE_CATCHUP_BATCH
    fired = 0
    instants: list[int] = []
    with transaction.atomic():
        due = list(
            Schedule.objects.select_for_update(skip_locked=True)
            .filter(next_run_at__lte=now)
            .order_by("next_run_at")[:limit]
        )
        fx = Effects()
        for s in due:
            instant, count = s.next_run_at, 0
            while instant <= now and count < per_schedule and fired < limit:
                occur(s, instant, fx)
                instants.append(instant)
                s.last_run_at = instant
                instant = cron.next_after(s.cron, instant)
                count += 1
                fired += 1
            s.next_run_at = instant
            s.save(update_fields=["last_run_at", "next_run_at"])
        finish(fx, now, inline=True)
    metrics.record_lag("schedule_fire", now, instants)
    return fired


def occur(s: Schedule, instant: int, fx: Effects) -> None:
    """Create-if-absent the occurrence promise, evaluated at ``instant`` (createdAt = instant; a
    backlogged occurrence past its deadline reads as timed out and is never dispatched)."""
    from promises.models import Promise

    promise_id = expand(s.promise_id, s.id, instant)
    if Promise.objects.filter(id=promise_id).exists():
        return
    req = PromiseCreateReq(
        id=promise_id,
        timeout_at=later(instant, s.promise_timeout),
        param=Value(headers=s.promise_param_headers, data=s.promise_param_data),
        tags={**s.promise_tags, **occurrence_tags(s.id, promise_id)},
    )
    services.create_with_task(req, instant, fx)
    metrics.record_schedule_promise()


def occurrence_tags(schedule_id: str, promise_id: str) -> dict[str, str]:
    """Tags the server adds to each occurrence, overriding the schedule's own (as the reference
    server): the occurrence is the root of its own call tree."""
    return {
        SCHEDULE: schedule_id,
        "resonate:origin": promise_id,
        BRANCH: promise_id,
        "resonate:parent": promise_id,
        "resonate:prefix": promise_id,
    }
