"""The dispatch table: request kind → (request type, handler). The protocol is the index."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from promises.handlers import (
    promise_create,
    promise_create_on_loop,
    promise_get,
    promise_register_callback,
    promise_register_listener,
    promise_search,
    promise_settle,
    promise_settle_on_loop,
)
from resonate_project.core.protocol import Response
from resonate_project.core.wire.promises import (
    PromiseCreateReq,
    PromiseGetReq,
    PromiseRegisterCallbackReq,
    PromiseRegisterListenerReq,
    PromiseSearchReq,
    PromiseSettleReq,
)
from resonate_project.core.wire.schedules import (
    ScheduleCreateReq,
    ScheduleDeleteReq,
    ScheduleGetReq,
    ScheduleSearchReq,
)
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
from resonate_project.edges.debug import (
    DebugReq,
    DebugTickReq,
    debug_reset,
    debug_snap,
    debug_start,
    debug_stop,
    debug_tick,
)
from schedules.handlers import schedule_create, schedule_delete, schedule_get, schedule_search
from tasks_app.handlers import (
    task_acquire,
    task_continue,
    task_create,
    task_fence,
    task_fence_on_loop,
    task_fulfill,
    task_get,
    task_halt,
    task_heartbeat,
    task_release,
    task_search,
    task_suspend,
)

Handler = Callable[[Any, int], Response]

KINDS: dict[str, tuple[type, Handler]] = {
    "promise.get": (PromiseGetReq, promise_get),
    "promise.create": (PromiseCreateReq, promise_create),
    "promise.settle": (PromiseSettleReq, promise_settle),
    "promise.register_callback": (PromiseRegisterCallbackReq, promise_register_callback),
    "promise.register_listener": (PromiseRegisterListenerReq, promise_register_listener),
    "promise.search": (PromiseSearchReq, promise_search),
    "task.get": (TaskGetReq, task_get),
    "task.create": (TaskCreateReq, task_create),
    "task.acquire": (TaskAcquireReq, task_acquire),
    "task.fence": (TaskFenceReq, task_fence),
    "task.heartbeat": (TaskHeartbeatReq, task_heartbeat),
    "task.suspend": (TaskSuspendReq, task_suspend),
    "task.fulfill": (TaskFulfillReq, task_fulfill),
    "task.release": (TaskReleaseReq, task_release),
    "task.halt": (TaskHaltReq, task_halt),
    "task.continue": (TaskContinueReq, task_continue),
    "task.search": (TaskSearchReq, task_search),
    "schedule.get": (ScheduleGetReq, schedule_get),
    "schedule.create": (ScheduleCreateReq, schedule_create),
    "schedule.delete": (ScheduleDeleteReq, schedule_delete),
    "schedule.search": (ScheduleSearchReq, schedule_search),
}

DEBUG_KINDS: dict[str, tuple[type, Handler]] = {
    "debug.start": (DebugReq, debug_start),
    "debug.stop": (DebugReq, debug_stop),
    "debug.reset": (DebugReq, debug_reset),
    "debug.snap": (DebugReq, debug_snap),
    "debug.tick": (DebugTickReq, debug_tick),
}

# Answered on the event loop where the database allows it (``envelope.handle_on_loop``); a
# handler here returns None to leave the request to the one in ``KINDS``.
LOOP_KINDS: dict[str, tuple[type, Any]] = {
    "promise.create": (PromiseCreateReq, promise_create_on_loop),
    "promise.settle": (PromiseSettleReq, promise_settle_on_loop),
    "task.fence": (TaskFenceReq, task_fence_on_loop),
}
