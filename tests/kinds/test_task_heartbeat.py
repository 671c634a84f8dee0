"""T-05 task.heartbeat (spec digest §4)."""

from __future__ import annotations

import pytest

from tasks_app.models import Task
from tests.support.factories import Api
from tests.support.task_kinds import (
    NOW,
    acquired,
    row,
    snapshot,
    targeted,
)

# --- T-05 task.heartbeat ------------------------------------------------------------------------


@pytest.fixture
def leases(api: Api) -> None:
    """a, b held by w1; c held by w2; d held by w1 but dead at NOW; e pending."""
    acquired(api, "a", ttl=10_000)
    acquired(api, "b", ttl=10_000)
    acquired(api, "c", ttl=10_000, pid="w2")
    acquired(api, "d", ttl=10_000, timeout=NOW)
    targeted(api, "e")


def expiries() -> dict[str, int | None]:
    return dict(Task.objects.values_list("promise_id", "expires_at"))


@pytest.mark.usefixtures("leases")
def test_task_heartbeat_extends_exactly_the_named_lease_by_its_stored_ttl(api: Api) -> None:
    before = expiries()
    res = api("task.heartbeat", now=NOW, pid="w1", tasks=[{"id": "a", "version": 1}])
    assert (res.status, res.data) == (200, {})
    assert expiries() == {**before, "a": NOW + 10_000}
    assert row("a").ttl == 10_000


@pytest.mark.usefixtures("leases")
@pytest.mark.parametrize(
    ("tid", "version"),
    [
        pytest.param("unknown", 1, id="unknown-id"),
        pytest.param("a", 0, id="wrong-version"),
        pytest.param("a", 2, id="newer-version"),
        pytest.param("c", 1, id="foreign-pid"),
        pytest.param("d", 1, id="dead-promise-C7"),
        pytest.param("e", 0, id="not-acquired"),
    ],
)
def test_task_heartbeat_skips_silently(api: Api, tid: str, version: int) -> None:
    before = snapshot()
    res = api("task.heartbeat", now=NOW, pid="w1", tasks=[{"id": tid, "version": version}])
    assert (res.status, res.data) == (200, {})
    assert snapshot() == before


@pytest.mark.usefixtures("leases")
def test_task_heartbeat_filters_each_reference_independently(api: Api) -> None:
    before = expiries()
    refs = [
        {"id": "unknown", "version": 1},
        {"id": "c", "version": 1},
        {"id": "a", "version": 0},
        {"id": "d", "version": 1},
        {"id": "b", "version": 1},
    ]
    res = api("task.heartbeat", now=NOW, pid="w1", tasks=refs)
    assert (res.status, res.data) == (200, {})
    assert expiries() == {**before, "b": NOW + 10_000}


@pytest.mark.usefixtures("leases")
def test_task_heartbeat_with_an_empty_list_is_200(api: Api) -> None:
    before = snapshot()
    res = api("task.heartbeat", now=NOW, pid="w1", tasks=[])
    assert (res.status, res.data) == (200, {})
    assert snapshot() == before
