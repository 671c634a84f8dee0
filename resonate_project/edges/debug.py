"""The debug surface (C12): only with RESONATE DEBUG; otherwise every debug.* answers 403.

``debug.start`` pauses the background steps (and the inline ones) so that only ``debug.tick``
runs them; ``debug.stop`` resumes; ``debug.reset`` empties all state and keeps the mode;
``debug.snap`` returns the whole stored state.
"""

from __future__ import annotations

from typing import Annotated, Any

from django.db import transaction
from msgspec import Meta, Struct

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import Response, ok
from resonate_project.core.schedules import schedule_record
from resonate_project.engine.debug import set_paused
from resonate_project.engine.steps import run_due
from schedules.models import Schedule
from tasks_app.models import Task


class DebugReq(Struct):
    pass


class DebugTickReq(Struct):
    time: Annotated[int, Meta(ge=0, le=2**63 - 1)]


def debug_start(req: DebugReq, now: int) -> Response:
    set_paused(True)
    return ok({})


def debug_stop(req: DebugReq, now: int) -> Response:
    set_paused(False)
    return ok({})


def debug_reset(req: DebugReq, now: int) -> Response:
    with transaction.atomic():
        Message.objects.all().delete()
        Schedule.objects.all().delete()
        Callback.objects.all().delete()
        Listener.objects.all().delete()
        Task.objects.all().delete()
        Promise.objects.all().delete()
    return ok({})


def debug_tick(req: DebugTickReq, now: int) -> Response:
    run_due(req.time, resonate_settings().STEP_BATCH)
    return ok([])  # the reference server answers an (empty) list


def debug_snap(req: DebugReq, now: int) -> Response:
    promises: list[dict[str, Any]] = []
    for p in Promise.objects.order_by("id"):
        record: dict[str, Any] = {
            "id": p.id,
            "state": p.state,
            "param": {"headers": p.param_headers, "data": p.param_data},
            "value": {"headers": p.value_headers, "data": p.value_data},
            "tags": p.tags,
            "timeoutAt": p.timeout_at,
            "createdAt": p.created_at,
        }
        if p.settled_at is not None:
            record["settledAt"] = p.settled_at
        promises.append(record)
    tasks = [
        {
            "id": t.promise_id,
            "state": t.state,
            "version": t.version,
            "pid": t.pid,
            "ttl": t.ttl,
            "expiresAt": t.expires_at,
            "retryAt": t.retry_at,
            "resumes": t.resumes,
        }
        for t in Task.objects.order_by("promise_id")
    ]
    callbacks = [
        {"awaited": c.awaited_id, "awaiter": c.awaiter_id, "ready": c.ready}
        for c in Callback.objects.order_by("awaited_id", "awaiter_id")
    ]
    listeners = [
        {"awaited": ln.awaited_id, "address": ln.address, "ready": ln.ready}
        for ln in Listener.objects.order_by("awaited_id", "address")
    ]
    messages = [
        {
            "key": m.key,
            "kind": m.kind,
            "address": m.address,
            **({"task": {"id": m.task_id, "version": m.version}} if m.kind == "execute" else {}),
            **({"promise": m.promise} if m.kind == "unblock" else {}),
        }
        for m in Message.objects.order_by("key")
    ]
    schedules = [schedule_record(s) for s in Schedule.objects.order_by("id")]
    return ok(
        {
            "promises": promises,
            "tasks": tasks,
            "callbacks": callbacks,
            "listeners": listeners,
            "schedules": schedules,
            "messages": messages,
        }
    )
