"""The one registry of request kinds: each declared once, with its request type, its handler, the
typed Python API function it is exposed as, whether ``manage.py resonate`` sends it, its shared
form for a batch (``together``: several requests answered by one statement), and whether it is a
debug kind.

Everything that lists kinds derives from :data:`KINDS`: the envelope (``edges.envelope``) looks a
kind up here, the OpenAPI description of ``POST /`` enumerates it (``edges.rest.schema``), the
command line offers the kinds marked ``cli`` (``edges.cli``), and tests/observability checks the
metrics' label set against it. Adding a kind is one entry here, its handler and service in its
app, and their tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import promises.handlers
import promises.services
import resonate_project.core.wire.promises
import resonate_project.core.wire.schedules
import resonate_project.core.wire.tasks
import schedules.handlers
import schedules.services
import tasks_app.handlers
import tasks_app.services
from resonate_project.core.protocol import Response
from resonate_project.edges import debug

Handler = Callable[[Any, int], Response]
# Several requests of one kind, each ``(request, now)``, their ids distinct, answered together in
# a batch's transaction: each answer, or None where ``handler`` answers that request instead.
Together = Callable[[list[tuple[Any, int]]], list[Response | None]]


@dataclass(frozen=True)
class Kind:
    name: str  # the envelope's ``kind``
    request: type  # the msgspec struct ``data`` decodes to (core.wire)
    handler: Handler  # one unit of work: ``handler(request, now) -> Response``
    service: Callable[..., Any] | None = None  # the typed Python API function (docs: Python API)
    cli: bool = False  # ``manage.py resonate`` sends it, locally or to --server
    together: Together | None = None  # statements shared across a batch (edges.api.together)
    debug: bool = False  # answered only under RESONATE_DEBUG, to an admin credential


KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind(
            "promise.get",
            resonate_project.core.wire.promises.PromiseGetReq,
            promises.handlers.promise_get,
            promises.services.promise_get,
            cli=True,
        ),
        Kind(
            "promise.create",
            resonate_project.core.wire.promises.PromiseCreateReq,
            promises.handlers.promise_create,
            promises.services.promise_create,
            cli=True,
            together=promises.handlers.promise_create_all,
        ),
        Kind(
            "promise.settle",
            resonate_project.core.wire.promises.PromiseSettleReq,
            promises.handlers.promise_settle,
            promises.services.promise_settle,
            cli=True,
            together=promises.handlers.promise_settle_all,
        ),
        Kind(
            "promise.register_callback",
            resonate_project.core.wire.promises.PromiseRegisterCallbackReq,
            promises.handlers.promise_register_callback,
            promises.services.promise_register_callback,
        ),
        Kind(
            "promise.register_listener",
            resonate_project.core.wire.promises.PromiseRegisterListenerReq,
            promises.handlers.promise_register_listener,
            promises.services.promise_register_listener,
        ),
        Kind(
            "promise.search",
            resonate_project.core.wire.promises.PromiseSearchReq,
            promises.handlers.promise_search,
            promises.services.promise_search,
            cli=True,
        ),
        Kind(
            "task.get",
            resonate_project.core.wire.tasks.TaskGetReq,
            tasks_app.handlers.task_get,
            tasks_app.services.task_get,
            cli=True,
        ),
        Kind(
            "task.create",
            resonate_project.core.wire.tasks.TaskCreateReq,
            tasks_app.handlers.task_create,
            tasks_app.services.task_create,
        ),
        Kind(
            "task.acquire",
            resonate_project.core.wire.tasks.TaskAcquireReq,
            tasks_app.handlers.task_acquire,
            tasks_app.services.task_acquire,
        ),
        Kind(
            "task.fence",
            resonate_project.core.wire.tasks.TaskFenceReq,
            tasks_app.handlers.task_fence,
            tasks_app.services.task_fence,
        ),
        Kind(
            "task.heartbeat",
            resonate_project.core.wire.tasks.TaskHeartbeatReq,
            tasks_app.handlers.task_heartbeat,
            tasks_app.services.task_heartbeat,
        ),
        Kind(
            "task.suspend",
            resonate_project.core.wire.tasks.TaskSuspendReq,
            tasks_app.handlers.task_suspend,
            tasks_app.services.task_suspend,
        ),
        Kind(
            "task.fulfill",
            resonate_project.core.wire.tasks.TaskFulfillReq,
            tasks_app.handlers.task_fulfill,
            tasks_app.services.task_fulfill,
        ),
        Kind(
            "task.release",
            resonate_project.core.wire.tasks.TaskReleaseReq,
            tasks_app.handlers.task_release,
            tasks_app.services.task_release,
        ),
        Kind(
            "task.halt",
            resonate_project.core.wire.tasks.TaskHaltReq,
            tasks_app.handlers.task_halt,
            tasks_app.services.task_halt,
            cli=True,
        ),
        Kind(
            "task.continue",
            resonate_project.core.wire.tasks.TaskContinueReq,
            tasks_app.handlers.task_continue,
            tasks_app.services.task_continue,
            cli=True,
        ),
        Kind(
            "task.search",
            resonate_project.core.wire.tasks.TaskSearchReq,
            tasks_app.handlers.task_search,
            tasks_app.services.task_search,
            cli=True,
        ),
        Kind(
            "schedule.get",
            resonate_project.core.wire.schedules.ScheduleGetReq,
            schedules.handlers.schedule_get,
            schedules.services.schedule_get,
            cli=True,
        ),
        Kind(
            "schedule.create",
            resonate_project.core.wire.schedules.ScheduleCreateReq,
            schedules.handlers.schedule_create,
            schedules.services.schedule_create,
            cli=True,
        ),
        Kind(
            "schedule.delete",
            resonate_project.core.wire.schedules.ScheduleDeleteReq,
            schedules.handlers.schedule_delete,
            schedules.services.schedule_delete,
            cli=True,
        ),
        Kind(
            "schedule.search",
            resonate_project.core.wire.schedules.ScheduleSearchReq,
            schedules.handlers.schedule_search,
            schedules.services.schedule_search,
            cli=True,
        ),
        Kind("debug.start", debug.DebugReq, debug.debug_start, debug=True),
        Kind("debug.stop", debug.DebugReq, debug.debug_stop, debug=True),
        Kind("debug.reset", debug.DebugReq, debug.debug_reset, debug=True),
        Kind("debug.snap", debug.DebugReq, debug.debug_snap, debug=True),
        Kind("debug.tick", debug.DebugTickReq, debug.debug_tick, debug=True),
    )
}

# The protocol's kinds, then the debug ones, each in declaration order.
PROTOCOL_KINDS = tuple(name for name, k in KINDS.items() if not k.debug)
DEBUG_KINDS = tuple(name for name, k in KINDS.items() if k.debug)
CLI_KINDS = frozenset(name for name, k in KINDS.items() if k.cli)
