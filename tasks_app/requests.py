"""Wire request types for ``task.*`` (spec §2.3). See ``promises/requests.py`` for the rules."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct, field

from promises.requests import (
    CreateAction,
    Head,
    Id,
    Limit,
    Ms,
    SettleAction,
    Text,
    Value,
)

Version = Annotated[int, Meta(ge=0, le=2**31 - 1)]
Pid = Text


class TaskGetReq(Struct):
    id: Id


class TaskCreateReq(Struct):
    pid: Pid
    ttl: Ms
    action: CreateAction


class TaskAcquireReq(Struct):
    id: Id
    version: Version
    pid: Pid
    ttl: Ms


class TaskFenceReq(Struct):
    id: Id
    version: Version
    action: CreateAction | SettleAction


class TaskRef(Struct):
    id: Id
    version: Version


class TaskHeartbeatReq(Struct):
    pid: Pid
    tasks: list[TaskRef] = field(default_factory=list)


class SuspendCallbackData(Struct):
    awaited: Id
    awaiter: Text | None = None  # not consulted by the spec: the awaiter is always the task


class CallbackAction(Struct, tag_field="kind", tag="promise.register_callback"):
    data: SuspendCallbackData
    head: Head = field(default_factory=dict)


class TaskSuspendReq(Struct):
    id: Id
    version: Version
    actions: list[CallbackAction]


class FulfillSettleData(Struct):
    state: str
    id: Text | None = None  # not consulted by the spec: the task settles its own promise
    value: Value = field(default_factory=Value)


class FulfillAction(Struct, tag_field="kind", tag="promise.settle"):
    data: FulfillSettleData
    head: Head = field(default_factory=dict)


class TaskFulfillReq(Struct):
    id: Id
    version: Version
    action: FulfillAction


class TaskReleaseReq(Struct):
    id: Id
    version: Version


class TaskHaltReq(Struct):
    id: Id


class TaskContinueReq(Struct):
    id: Id


class TaskSearchReq(Struct):
    state: str | None = None
    limit: Limit | None = None
    cursor: Text | None = None
