"""T-01 task.get (spec digest §4)."""

from __future__ import annotations

import pytest

from tests.support.factories import Api
from tests.support.task_kinds import (
    NOW,
    VIEWED,
    acquired,
    build,
    row,
    snapshot,
    task_of,
    with_resume,
)

# --- T-01 task.get ------------------------------------------------------------------------------


@pytest.mark.parametrize("situation", ["absent", "untargeted"])
def test_task_get_404_without_a_task(api: Api, situation: str) -> None:
    build(api, "t", situation)
    assert api("task.get", now=NOW, id="t").status == 404


@pytest.mark.parametrize("situation", list(VIEWED))
def test_task_get_serves_the_viewed_record_and_writes_nothing(api: Api, situation: str) -> None:
    build(api, "t", situation)
    before = snapshot()
    assert task_of(api, "t") == {"id": "t", **VIEWED[situation]}
    assert snapshot() == before


def test_task_get_reads_fulfilled_from_the_deadline_on_before_anything_is_written(
    api: Api,
) -> None:
    acquired(api, "t", timeout=NOW)
    assert task_of(api, "t", now=NOW - 1)["state"] == "acquired"
    assert task_of(api, "t", now=NOW) == {
        "id": "t",
        "state": "fulfilled",
        "version": 1,
        "resumes": 0,
    }
    assert row("t").state == "acquired"  # -p: the read materialised nothing


def test_task_get_resumes_is_a_count(api: Api) -> None:
    acquired(api, "t")
    with_resume(api, "t", "x")
    with_resume(api, "t", "y")
    assert sorted(row("t").resumes) == ["x", "y"]
    assert task_of(api, "t")["resumes"] == 2
