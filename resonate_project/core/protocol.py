"""Responses, records and the projection (spec §2.2, "fact P" and "fact T").

Every response is built from these functions, so every response serves the projected view (C8):
a promise stored ``pending`` whose deadline has passed reads as settled at its deadline, and its
task reads as ``fulfilled``, whether or not the timeout step has written that yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

if TYPE_CHECKING:
    from promises.models import Promise
    from tasks_app.models import Task

# The protocol version this server speaks (the envelope's ``head.version``).
PROTOCOL_VERSION = "2026-04-01"

PENDING = "pending"
RESOLVED = "resolved"
REJECTED_TIMEDOUT = "rejected_timedout"
SETTABLE = ("resolved", "rejected", "rejected_canceled")
# The states a search filters by, as the wire names them: a promise's projected state, a task's
# viewed state (promises.selectors and tasks_app.selectors compute them).
PROMISE_STATES = ("pending", "resolved", "rejected", "rejected_canceled", "rejected_timedout")
TASK_STATES = ("pending", "acquired", "suspended", "halted", "fulfilled")


@dataclass(slots=True)
class Response:
    """A protocol outcome. ``data`` is an object on 2xx/300 and a message string otherwise."""

    status: int
    data: Any

    @property
    def ok(self) -> bool:
        return self.status < 400


def ok(data: Any) -> Response:
    return Response(200, data)


def fail(status: int, message: str) -> Response:
    return Response(status, message)


def bad_request(message: str) -> Response:
    return Response(400, message)


# --- typed records (what the services return; the wire's shapes) -------------------------------


class ValueRecord(TypedDict, total=False):
    headers: dict[str, str]
    data: str  # base64, as the SDKs send it


class PromiseRecord(TypedDict):
    id: str
    state: str  # projected: a pending promise past its deadline reads as settled
    param: ValueRecord
    value: ValueRecord
    tags: dict[str, str]
    timeoutAt: int
    createdAt: int
    settledAt: NotRequired[int]


class TaskRecord(TypedDict):
    id: str
    state: str  # viewed: fulfilled once its promise is no longer pending
    version: int
    resumes: int
    ttl: NotRequired[int]
    pid: NotRequired[str]


class ScheduleRecord(TypedDict):
    id: str
    cron: str
    promiseId: str
    promiseTimeout: int
    promiseParam: ValueRecord
    promiseTags: dict[str, str]
    createdAt: int
    nextRunAt: int
    lastRunAt: NotRequired[int]


class Claim(TypedDict):
    """What acquiring a task answers: the task, its promise, and the branch preload."""

    task: TaskRecord
    promise: PromiseRecord
    preload: list[PromiseRecord]


@dataclass(slots=True)
class Page[R]:
    """One search page: the records in id order and the cursor of the next page, if any."""

    items: list[R] = field(default_factory=list)
    cursor: str | None = None


# --- projection -------------------------------------------------------------------------------


def is_live(p: Promise, now: int) -> bool:
    """``live(p, now)``: stored pending, deadline not reached (at ``timeoutAt`` it is dead)."""
    return p.state == PENDING and now < p.timeout_at


def timeout_verdict(timer: bool) -> str:
    """The state a promise takes at its deadline: resolved for a timer, else timed out."""
    return RESOLVED if timer else REJECTED_TIMEDOUT


def projected_state(p: Promise, now: int) -> tuple[str, int | None]:
    if p.state == PENDING and p.timeout_at <= now:
        return timeout_verdict(p.timer), p.timeout_at
    return p.state, p.settled_at


def value_json(headers: dict[str, str] | None, data: str | None) -> ValueRecord:
    value: ValueRecord = {}
    if headers is not None:
        value["headers"] = headers
    if data is not None:
        value["data"] = data
    return value


def promise_record(p: Promise, now: int) -> PromiseRecord:
    state, settled_at = projected_state(p, now)
    record: PromiseRecord = {
        "id": p.id,
        "state": state,
        "param": value_json(p.param_headers, p.param_data),
        "value": value_json(p.value_headers, p.value_data),
        "tags": p.tags,
        "timeoutAt": p.timeout_at,
        "createdAt": p.created_at,
    }
    if settled_at is not None:
        record["settledAt"] = settled_at
    return record


def viewed_task_state(t: Task, p: Promise, now: int) -> str:
    """Fact T: a task whose promise (projected) is no longer pending reads as fulfilled."""
    if t.state != "fulfilled" and not is_live(p, now):
        return "fulfilled"
    return t.state


def task_record(t: Task, p: Promise, now: int) -> TaskRecord:
    state = viewed_task_state(t, p, now)
    if state == "fulfilled":
        return {"id": p.id, "state": "fulfilled", "version": t.version, "resumes": 0}
    record: TaskRecord = {
        "id": p.id,
        "state": state,
        "version": t.version,
        "resumes": len(t.resumes),
    }
    if t.ttl is not None:
        record["ttl"] = t.ttl
    if t.pid is not None:
        record["pid"] = t.pid
    return record
