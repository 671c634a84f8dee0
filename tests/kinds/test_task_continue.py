"""T-10 task.continue (spec digest §4)."""

from __future__ import annotations

import pytest

from tests.support.factories import Api
from tests.support.task_kinds import (
    EXTERNAL,
    NOW,
    RETRY_MS,
    T0,
    TARGET,
    acquired,
    build,
    execute_of,
    ok,
    promise,
    row,
    snapshot,
    suspend,
    task_of,
    with_resume,
)

# --- T-10 task.continue -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("situation", "status"),
    [
        ("absent", 404),
        ("untargeted", 404),
        ("pending", 409),
        ("acquired", 409),
        ("suspended", 409),
        ("fulfilled", 409),
        ("dead_pending", 409),
        ("dead_halted", 409),  # views fulfilled: not halted
    ],
)
def test_task_continue_refusals_write_nothing(api: Api, situation: str, status: int) -> None:
    build(api, "t", situation)
    before = snapshot()
    assert api("task.continue", now=NOW, id="t").status == status
    assert snapshot() == before


def test_task_continue_makes_a_halted_task_pending_and_dispatches_it(api: Api) -> None:
    acquired(api, "t")
    with_resume(api, "t", "x")
    ok(api("task.halt", now=T0, id="t"))
    res = api("task.continue", now=NOW, id="t")
    assert (res.status, res.data) == (200, {})
    assert task_of(api, "t") == {"id": "t", "state": "pending", "version": 1, "resumes": 1}
    assert row("t").retry_at == NOW + RETRY_MS
    execute = execute_of("t")
    assert execute is not None
    assert (execute.version, execute.address, execute.created_at) == (1, TARGET, NOW)


def test_task_continue_after_a_wake_while_halted_dispatches_with_the_resume(api: Api) -> None:
    acquired(api, "t")
    promise(api, "x", tags=EXTERNAL)
    assert suspend(api, "t", 1, "x").status == 200
    ok(api("task.halt", now=T0, id="t"))
    ok(api("promise.settle", now=T0, id="x", state="resolved", value={}))
    ok(api("task.continue", now=NOW, id="t"))
    assert task_of(api, "t") == {"id": "t", "state": "pending", "version": 1, "resumes": 1}
    execute = execute_of("t")
    assert execute is not None
    assert (execute.version, execute.created_at) == (1, NOW)
