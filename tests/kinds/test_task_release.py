"""T-08 task.release (spec digest §4)."""

from __future__ import annotations

from tests.support.factories import Api
from tests.support.task_kinds import (
    NOW,
    RETRY_MS,
    TARGET,
    acquire,
    acquired,
    execute_of,
    ok,
    row,
    task_of,
    with_resume,
)

# --- T-08 task.release --------------------------------------------------------------------------


def test_task_release_returns_the_task_to_pending_and_dispatches_it(api: Api) -> None:
    acquired(api, "t")
    with_resume(api, "t", "x")
    res = api("task.release", now=NOW, id="t", version=1)
    assert (res.status, res.data) == (200, {})
    assert task_of(api, "t") == {"id": "t", "state": "pending", "version": 1, "resumes": 1}
    t = row("t")
    assert (t.pid, t.ttl, t.expires_at, t.resumes) == (None, None, None, ["x"])
    assert t.retry_at == NOW + RETRY_MS
    execute = execute_of("t")
    assert execute is not None
    assert (execute.version, execute.address, execute.created_at) == (1, TARGET, NOW)
    # The version is unchanged, so the next acquire presents it.
    assert ok(acquire(api, "t", 1, now=NOW))["task"]["version"] == 2
