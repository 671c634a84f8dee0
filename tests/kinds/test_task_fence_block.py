"""The fence block (spec digest §4): task absent 404 → task's promise absent 409 → viewed state
wrong 409 → promise not pending 409 → version mismatch 409, for task.acquire (expects pending)
and for task.fence, task.suspend, task.fulfill and task.release (expect acquired); every refusal
writes nothing and the holder passes.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import Api
from tests.support.task_kinds import (
    EXTERNAL,
    NOW,
    TARGETED,
    Request,
    acquire,
    acquired,
    build,
    callback_action,
    create_action,
    promise,
    settle_action,
    snapshot,
)

# --- the fence block: acquire (expects pending) ------------------------------------------------

ACQUIRE_CASES = [
    ("absent", 0, 404),
    ("untargeted", 0, 404),
    ("acquired", 1, 409),  # the version is right, the state is not: state before version
    ("acquired", 0, 409),
    ("suspended", 1, 409),
    ("halted", 1, 409),
    ("fulfilled", 1, 409),
    ("dead_pending", 0, 409),  # stored pending, promise dead: views fulfilled
    ("dead_pending", 3, 409),
    ("pending", 1, 409),  # version mismatch
    ("pending", 5, 409),
]


@pytest.mark.parametrize(("situation", "version", "status"), ACQUIRE_CASES)
def test_task_acquire_refuses_in_fence_block_order_and_writes_nothing(
    api: Api, situation: str, version: int, status: int
) -> None:
    build(api, "t", situation)
    before = snapshot()
    res = acquire(api, "t", version, pid="w2", now=NOW)
    assert res.status == status, res.data
    assert isinstance(res.data, str)
    assert snapshot() == before


# --- the fence block: fence, suspend, fulfill, release (expect acquired) -----------------------


def fence_create_child(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": create_action("child", tags=TARGETED)}


def fence_settle_ext(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": settle_action("ext")}


def fence_settle_missing(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": settle_action("nope")}


def fence_settle_unsettable(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": settle_action("ext", "pending")}


def suspend_on_ext(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "actions": [callback_action("ext", tid)]}


def suspend_on_missing(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "actions": [callback_action("nope", tid)]}


def fulfill_resolved(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version, "action": settle_action(tid)}


def release(tid: str, version: int) -> dict[str, Any]:
    return {"id": tid, "version": version}


# (kind, request, status once the guards pass)
BLOCK_HANDLERS = [
    pytest.param("task.fence", fence_create_child, 200, id="fence-create"),
    pytest.param("task.fence", fence_settle_ext, 200, id="fence-settle"),
    pytest.param("task.fence", fence_settle_missing, 200, id="fence-settle-inner-404"),
    pytest.param("task.fence", fence_settle_unsettable, 200, id="fence-settle-inner-400"),
    pytest.param("task.suspend", suspend_on_ext, 200, id="suspend"),
    pytest.param("task.suspend", suspend_on_missing, 422, id="suspend-awaited-missing"),
    pytest.param("task.fulfill", fulfill_resolved, 200, id="fulfill"),
    pytest.param("task.release", release, 200, id="release"),
]

BLOCK_CASES = [
    ("absent", 1, 404),
    ("untargeted", 1, 404),
    ("pending", 0, 409),
    ("pending", 1, 409),
    ("suspended", 1, 409),
    ("halted", 1, 409),
    ("fulfilled", 1, 409),
    ("dead_acquired", 1, 409),  # right version, promise dead: views fulfilled
    ("dead_acquired", 0, 409),
    ("acquired", 0, 409),  # version mismatch, checked last
    ("acquired", 2, 409),
]


@pytest.mark.parametrize(("situation", "version", "status"), BLOCK_CASES)
@pytest.mark.parametrize(("kind", "request_for", "passed"), BLOCK_HANDLERS)
def test_fence_block_refuses_in_order_and_writes_nothing(
    api: Api,
    kind: str,
    request_for: Request,
    passed: int,
    situation: str,
    version: int,
    status: int,
) -> None:
    promise(api, "ext", tags=EXTERNAL)
    build(api, "t", situation)
    before = snapshot()
    res = api(kind, now=NOW, **request_for("t", version))
    assert res.status == status, res.data
    assert isinstance(res.data, str)
    assert snapshot() == before


@pytest.mark.parametrize(("kind", "request_for", "passed"), BLOCK_HANDLERS)
def test_fence_block_lets_the_holder_through(
    api: Api, kind: str, request_for: Request, passed: int
) -> None:
    promise(api, "ext", tags=EXTERNAL)
    acquired(api, "t")
    res = api(kind, now=NOW, **request_for("t", 1))
    assert res.status == passed, res.data
