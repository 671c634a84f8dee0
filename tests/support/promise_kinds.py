"""Helpers of the promise kinds' table tests (tests/kinds/test_promise_*.py; spec digest §4 P-01 …
P-05 and promise.search).

Every test picks its own ``now``. "Nothing was written" is checked by comparing a snapshot of
every stored table before and after the request, so reads, refusals and absorbed settles are
held to the read discipline -p (C8, §2.5, §3).
"""

from __future__ import annotations

import random
import re
from typing import Any

from django.db.models import Model

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import FAR, Api

T0 = 10_000  # when the fixtures of a test are created
RETRY_TIMEOUT_MS = 5_000  # the server's default redispatch cadence (brief, spec §1.6)

TARGET = "poll://any@workers"
TARGETED = {"resonate:target": TARGET}
EXTERNAL = {"resonate:external": "true"}
TIMER = {"resonate:timer": "true"}
GLOBAL = {"resonate:scope": "global"}  # external by the brief's decision (TypeScript SDK)
INTERNAL: dict[str, str] = {}
LOCAL = {"resonate:scope": "local"}


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every stored row, for "this request wrote nothing" assertions."""
    models: tuple[type[Model], ...] = (Promise, Task, Callback, Listener, Message, Schedule)
    return {
        m.__name__: [dict(row) for row in m._default_manager.order_by("pk").values()]
        for m in models
    }


def names(message: Any, field: str) -> bool:
    """Whether a 400 message names ``field`` (as a word, so "id" does not match "invalid")."""
    pattern = rf"(?<![\w]){re.escape(field)}(?![\w])"
    return isinstance(message, str) and re.search(pattern, message) is not None


def create(
    api: Api,
    promise_id: str,
    *,
    now: int = T0,
    timeout_at: int = FAR,
    tags: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    res = api(
        "promise.create", now=now, id=promise_id, timeoutAt=timeout_at, tags=tags or {}, **extra
    )
    assert res.status == 200, res.data
    record: dict[str, Any] = res.data["promise"]
    return record


def settle(api: Api, promise_id: str, state: str = "resolved", *, now: int, **extra: Any) -> Any:
    res = api("promise.settle", now=now, id=promise_id, state=state, **extra)
    assert res.status == 200, res.data
    return res.data["promise"]


def stored(promise_id: str) -> Promise:
    return Promise.objects.get(id=promise_id)


def task_of(api: Api, promise_id: str, now: int) -> dict[str, Any]:
    res = api("task.get", now=now, id=promise_id)
    assert res.status == 200, res.data
    task: dict[str, Any] = res.data["task"]
    return task


def callbacks() -> set[tuple[str, str]]:
    return set(Callback.objects.values_list("awaited_id", "awaiter_id"))


def listeners() -> set[tuple[str, str]]:
    return set(Listener.objects.values_list("awaited_id", "address"))


def executes() -> dict[str, tuple[int | None, str, int]]:
    """Outstanding execute messages: task id → (version, address, written at)."""
    rows = Message.objects.filter(kind="execute").values_list(
        "task_id", "version", "address", "created_at"
    )
    return {str(task_id): (version, address, at) for task_id, version, address, at in rows}


def random_text(n: int, alphabet: str, seed: int = 7) -> str:
    """Text that does not compress (a deterministic stand-in for real-world addresses and ids)."""
    rnd = random.Random(seed)
    return "".join(rnd.choice(alphabet) for _ in range(n))


def callback_action(awaited: str, awaiter: str) -> dict[str, Any]:
    return {
        "kind": "promise.register_callback",
        "head": {},
        "data": {"awaited": awaited, "awaiter": awaiter},
    }
