"""T-04 task.fence (spec digest §4)."""

from __future__ import annotations

import pytest

from tasks_app.models import Task
from tests.support.factories import FAR, Api
from tests.support.task_kinds import (
    EXTERNAL,
    NOW,
    PROTOCOL_VERSION,
    TARGET,
    TARGETED,
    TIMER,
    acquired,
    create_action,
    execute_of,
    ok,
    promise,
    record_of,
    row,
    settle_action,
    snapshot,
    targeted,
    task_of,
)

# --- T-04 task.fence ----------------------------------------------------------------------------


@pytest.mark.parametrize("child_tags", [{}, TARGETED], ids=["untargeted", "targeted"])
def test_task_fence_create_runs_promise_create_and_wraps_it(
    api: Api, child_tags: dict[str, str]
) -> None:
    acquired(api, "t")
    task_before = list(Task.objects.filter(promise_id="t").values())
    action = create_action("t.1", tags=child_tags, corr="c-7")
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    assert set(data) == {"action", "preload"}
    assert isinstance(data["preload"], list)
    child = record_of(api, "t.1")
    assert child["state"] == "pending"
    assert child["createdAt"] == NOW
    assert data["action"] == {
        "kind": "promise.create",
        "head": {"corrId": "c-7", "status": 200, "version": PROTOCOL_VERSION},
        "data": {"promise": child},
    }
    if child_tags:
        assert task_of(api, "t.1") == {"id": "t.1", "state": "pending", "version": 0, "resumes": 0}
        message = execute_of("t.1")
        assert message is not None
        assert (message.version, message.address) == (0, TARGET)
    else:
        assert api("task.get", now=NOW, id="t.1").status == 404
        assert execute_of("t.1") is None
    # The fence writes nothing to the task itself: same version, same lease.
    assert list(Task.objects.filter(promise_id="t").values()) == task_before


def test_task_fence_create_of_an_existing_promise_returns_it_unchanged(api: Api) -> None:
    acquired(api, "t")
    original = promise(api, "t.1", tags=EXTERNAL)
    action = create_action("t.1", timeout=FAR - 5, tags=TARGETED)
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    assert data["action"]["head"]["status"] == 200
    assert data["action"]["data"] == {"promise": original}
    assert api("task.get", now=NOW, id="t.1").status == 404


def test_task_fence_timer_with_target_creates_an_undispatched_task(api: Api) -> None:
    """Brief decision: timer+target is accepted (Python SDK ctx.sleep); the digest says 400."""
    acquired(api, "t")
    action = create_action("t.sleep", timeout=NOW + 60_000, tags={**TARGETED, **TIMER})
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    assert data["action"]["head"]["status"] == 200
    assert task_of(api, "t.sleep") == {
        "id": "t.sleep",
        "state": "pending",
        "version": 0,
        "resumes": 0,
    }
    assert row("t.sleep").retry_at == NOW + 60_000
    assert execute_of("t.sleep") is None


@pytest.mark.parametrize("state", ["resolved", "rejected", "rejected_canceled"])
def test_task_fence_settle_runs_promise_settle_and_fulfils_its_task(api: Api, state: str) -> None:
    acquired(api, "t")
    targeted(api, "child")
    value = {"headers": {"k": "v"}, "data": "eA=="}
    action = settle_action("child", state, value, corr="c-8")
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    settled = record_of(api, "child")
    assert (settled["state"], settled["value"], settled["settledAt"]) == (state, value, NOW)
    assert data["action"] == {
        "kind": "promise.settle",
        "head": {"corrId": "c-8", "status": 200, "version": PROTOCOL_VERSION},
        "data": {"promise": settled},
    }
    assert task_of(api, "child")["state"] == "fulfilled"
    assert row("child").state == "fulfilled"  # coupled write (§1.7)
    assert task_of(api, "t")["version"] == 1


def test_task_fence_settle_of_a_missing_promise_is_an_inner_404(api: Api) -> None:
    acquired(api, "t")
    before = snapshot()
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=settle_action("nope")))
    assert data["action"]["kind"] == "promise.settle"
    assert data["action"]["head"]["status"] == 404
    assert isinstance(data["action"]["data"], str)
    assert snapshot() == before


@pytest.mark.parametrize("state", ["pending", "rejected_timedout", "done"])
def test_task_fence_settle_with_an_unsettable_state_is_an_inner_400(api: Api, state: str) -> None:
    acquired(api, "t")
    promise(api, "ext", tags=EXTERNAL)
    before = snapshot()
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=settle_action("ext", state)))
    assert data["action"]["head"]["status"] == 400
    assert isinstance(data["action"]["data"], str)
    assert "state" in data["action"]["data"]
    assert snapshot() == before


def test_task_fence_preload_includes_a_child_created_in_the_same_branch(api: Api) -> None:
    acquired(api, "t", tags={"resonate:branch": "t"})
    action = create_action("t.1", tags={"resonate:branch": "t"})
    data = ok(api("task.fence", now=NOW, id="t", version=1, action=action))
    assert data["preload"] == [record_of(api, "t.1")]
