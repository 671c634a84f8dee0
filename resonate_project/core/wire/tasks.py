"""Wire request types for ``task.*`` (spec §2.3). See ``core/wire/promises.py`` for the rules."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta, Struct, field

from resonate_project.core.wire.promises import (
    CreateAction,
    Head,
    Id,
    Limit,
    Ms,
    Req,
    SettleAction,
    Text,
    Value,
)

Version = Annotated[int, Meta(ge=0, le=2**31 - 1)]
Pid = Text


class TaskGetReq(Req):
    id: Id


class TaskCreateReq(Req):
    pid: Pid
    ttl: Ms
    action: CreateAction


class TaskAcquireReq(Req):
    id: Id
    version: Version
    pid: Pid
    ttl: Ms


class TaskFenceReq(Req):
    id: Id
    version: Version
    action: CreateAction | SettleAction


class TaskRef(Req):
    id: Id
    version: Version


class TaskHeartbeatReq(Req):
    pid: Pid
    tasks: list[TaskRef] = field(default_factory=list)


class SuspendCallbackData(Req):
    awaited: Id
    awaiter: Text | None = None  # not consulted by the spec: the awaiter is always the task


class CallbackAction(Struct, tag_field="kind", tag="promise.register_callback"):
    data: SuspendCallbackData
    head: Head = field(default_factory=dict)


class TaskSuspendReq(Req):
    id: Id
    version: Version
    actions: list[CallbackAction]


class FulfillSettleData(Req):
    state: str
    id: Text | None = None  # not consulted by the spec: the task settles its own promise
    value: Value = field(default_factory=Value)


class FulfillAction(Struct, tag_field="kind", tag="promise.settle"):
    data: FulfillSettleData
    head: Head = field(default_factory=dict)


class TaskFulfillReq(Req):
    id: Id
    version: Version
    action: FulfillAction


class TaskReleaseReq(Req):
    id: Id
    version: Version


class TaskHaltReq(Req):
    id: Id


class TaskContinueReq(Req):
    id: Id


class TaskSearchReq(Req):
    state: str | None = None
    limit: Limit | None = None
    cursor: Text | None = None
    # Only ids starting with this (an extension; a prefix-limited credential is narrowed to its
    # prefix this way, see resonate_project/access/rules.py).
    idPrefix: Text | None = None
