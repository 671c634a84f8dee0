"""promise.search: filters on the projected state and on exact tags, pages by id with a cursor."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import FAR, Api
from tests.support.promise_kinds import (
    T0,
    TARGET,
    TARGETED,
    TIMER,
    create,
    settle,
    snapshot,
)

# --- promise.search -----------------------------------------------------------------------------


def _search_population(api: Api) -> None:
    """Eight promises, one per way of being in each projected state at NOW_S."""
    create(api, "live", now=T0)
    create(api, "dead", now=T0, timeout_at=NOW_S)
    create(api, "dead-timer", now=T0, timeout_at=NOW_S, tags=TIMER)
    for promise_id, state in [
        ("resolved", "resolved"),
        ("rejected", "rejected"),
        ("canceled", "rejected_canceled"),
    ]:
        create(api, promise_id, now=T0)
        settle(api, promise_id, state, now=T0 + 1)
    create(api, "born-dead", now=T0, timeout_at=T0)
    create(api, "born-dead-timer", now=T0, timeout_at=T0, tags=TIMER)


NOW_S = 40_000
ALL = [
    "born-dead",
    "born-dead-timer",
    "canceled",
    "dead",
    "dead-timer",
    "live",
    "rejected",
    "resolved",
]


@pytest.mark.parametrize(
    ("now", "state", "expected"),
    [
        pytest.param(NOW_S, None, ALL, id="no filter"),
        pytest.param(NOW_S, "pending", ["live"], id="pending at the deadline"),
        pytest.param(NOW_S - 1, "pending", ["dead", "dead-timer", "live"], id="pending 1ms before"),
        pytest.param(NOW_S, "rejected_timedout", ["born-dead", "dead"], id="timed out"),
        pytest.param(NOW_S - 1, "rejected_timedout", ["born-dead"], id="timed out 1ms before"),
        pytest.param(
            NOW_S, "resolved", ["born-dead-timer", "dead-timer", "resolved"], id="resolved"
        ),
        pytest.param(NOW_S, "rejected", ["rejected"], id="rejected"),
        pytest.param(NOW_S, "rejected_canceled", ["canceled"], id="canceled"),
    ],
)
def test_search_filters_on_the_projected_state_and_writes_nothing(
    api: Api, now: int, state: str | None, expected: list[str]
) -> None:
    _search_population(api)
    before = snapshot()
    res = api("promise.search", now=now, **({} if state is None else {"state": state}))
    assert res.status == 200, res.data
    found = res.data["promises"]
    assert [p["id"] for p in found] == expected
    assert "cursor" not in res.data
    for record in found:
        assert record == api("promise.get", now=now, id=record["id"]).data["promise"]
    assert snapshot() == before


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        pytest.param({"env": "prod"}, ["a", "c"], id="one tag"),
        pytest.param({"env": "prod", "team": "x"}, ["c"], id="every tag must match"),
        pytest.param({"env": "pro"}, [], id="no prefix match"),
        pytest.param({"env": "PROD"}, [], id="case-sensitive"),
        pytest.param({"missing": "prod"}, [], id="absent key"),
        pytest.param({"resonate:target": TARGET}, ["d"], id="resonate:target"),
        pytest.param({"a.b": "1"}, ["d"], id="key with a dot"),
        pytest.param({}, ["a", "b", "c", "d"], id="empty filter"),
    ],
)
def test_search_filters_on_exact_tags(api: Api, tags: dict[str, str], expected: list[str]) -> None:
    create(api, "a", tags={"env": "prod"})
    create(api, "b", tags={"env": "dev", "team": "x"})
    create(api, "c", tags={"env": "prod", "team": "x"})
    create(api, "d", tags={**TARGETED, "a.b": "1", "env": "production"})
    res = api("promise.search", now=T0, tags=tags)
    assert res.status == 200, res.data
    assert [p["id"] for p in res.data["promises"]] == expected


@pytest.mark.parametrize(
    ("count", "limit", "pages"),
    [
        pytest.param(25, 10, [10, 10, 5], id="25 by 10"),
        pytest.param(20, 10, [10, 10], id="20 by 10: no cursor on a full last page"),
        pytest.param(3, 1, [1, 1, 1], id="3 by 1"),
        pytest.param(0, 10, [0], id="none"),
        pytest.param(5, 1000, [5], id="limit 1000"),
        pytest.param(101, None, [100, 1], id="default limit 100"),
    ],
)
def test_search_pages_by_id_with_a_cursor_absent_on_the_last_page(
    api: Api, count: int, limit: int | None, pages: list[int]
) -> None:
    ids = [f"p{i:03d}" for i in range(count)]
    for promise_id in reversed(ids):
        create(api, promise_id)
    seen: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    for page in range(len(pages)):
        data: dict[str, Any] = {} if limit is None else {"limit": limit}
        if cursor is not None:
            data["cursor"] = cursor
        res = api("promise.search", now=T0, **data)
        assert res.status == 200, res.data
        found = [p["id"] for p in res.data["promises"]]
        seen += found
        sizes.append(len(found))
        cursor = res.data.get("cursor")
        if page < len(pages) - 1:
            assert cursor == found[-1]
    assert cursor is None
    assert sizes == pages
    assert seen == ids


def test_search_combines_state_tags_and_paging(api: Api) -> None:
    for i in range(12):
        create(
            api,
            f"p{i:02d}",
            tags={"g": "odd" if i % 2 else "even"},
            timeout_at=FAR if i < 6 else 20_000,
        )
    first = api(
        "promise.search", now=30_000, state="rejected_timedout", tags={"g": "even"}, limit=2
    )
    assert first.status == 200, first.data
    assert [p["id"] for p in first.data["promises"]] == ["p06", "p08"]
    second = api(
        "promise.search",
        now=30_000,
        state="rejected_timedout",
        tags={"g": "even"},
        limit=2,
        cursor=first.data["cursor"],
    )
    assert [p["id"] for p in second.data["promises"]] == ["p10"]
    assert "cursor" not in second.data
