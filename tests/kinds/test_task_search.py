"""task.search (brief: ``{state?, limit?, cursor?} -> {tasks, cursor?}``, the viewed state)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import Api
from tests.support.task_kinds import (
    NOW,
    VIEWED,
    acquired,
    build,
    ok,
    promise,
    snapshot,
    targeted,
    task_of,
)

# --- task.search (brief: {state?, limit?, cursor?} -> {tasks, cursor?}, viewed state) ----------


def search(api: Api, now: int = NOW, **data: Any) -> dict[str, Any]:
    return ok(api("task.search", now=now, **data))


@pytest.mark.parametrize("state", ["pending", "acquired", "suspended", "halted", "fulfilled"])
def test_task_search_filters_on_the_viewed_state(api: Api, state: str) -> None:
    for situation in VIEWED:
        build(api, situation, situation)
    promise(api, "plain")  # a promise without a task is never listed
    before = snapshot()
    data = search(api, state=state)
    expected = sorted(s for s, viewed in VIEWED.items() if viewed["state"] == state)
    assert [t["id"] for t in data["tasks"]] == expected
    assert "cursor" not in data
    for record in data["tasks"]:
        assert record == task_of(api, record["id"])
    assert snapshot() == before


def test_task_search_without_a_state_lists_every_task_in_id_order(api: Api) -> None:
    for situation in VIEWED:
        build(api, situation, situation)
    promise(api, "plain")
    data = search(api)
    assert [t["id"] for t in data["tasks"]] == sorted(VIEWED)
    assert data["tasks"] == [task_of(api, s) for s in sorted(VIEWED)]


@pytest.mark.parametrize(("count", "limit"), [(5, 2), (4, 2), (3, 1)])
def test_task_search_pages_by_cursor(api: Api, count: int, limit: int) -> None:
    ids = [f"s{i}" for i in range(1, count + 1)]
    for tid in reversed(ids):
        targeted(api, tid)
    promise(api, "s0")  # untargeted: not a task
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        query: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            query["cursor"] = cursor
        data = search(api, **query)
        page = [t["id"] for t in data["tasks"]]
        assert len(page) <= limit
        seen.extend(page)
        pages += 1
        if "cursor" not in data:
            break
        assert data["cursor"] == page[-1]
        cursor = data["cursor"]
    assert seen == ids
    assert pages == -(-count // limit)  # no trailing empty page when count % limit == 0


def test_task_search_pages_with_a_state_filter(api: Api) -> None:
    for tid in ["a1", "a2", "a3"]:
        acquired(api, tid)
    targeted(api, "a15")
    first = search(api, state="acquired", limit=2)
    assert [t["id"] for t in first["tasks"]] == ["a1", "a2"]
    second = search(api, state="acquired", limit=2, cursor=first["cursor"])
    assert [t["id"] for t in second["tasks"]] == ["a3"]
    assert "cursor" not in second


def test_task_search_limit_defaults_to_100(api: Api) -> None:
    for i in range(101):
        targeted(api, f"n{i:03d}")
    data = search(api)
    assert len(data["tasks"]) == 100
    assert data["cursor"] == "n099"
    rest = search(api, cursor=data["cursor"])
    assert [t["id"] for t in rest["tasks"]] == ["n100"]


@pytest.mark.parametrize(
    ("data", "field"),
    [({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"state": "claimed"}, "state")],
)
def test_task_search_400s(api: Api, data: dict[str, Any], field: str) -> None:
    res = api("task.search", now=NOW, **data)
    assert res.status == 400
    assert isinstance(res.data, str)
    assert field in res.data
