"""The steps' deadline reads use their partial indexes on SQLite (one probe each, no sort of
every pending row) whichever Django wrote ``promise_armed_timeout``: 6.0 renders its condition
``"external" AND …``, 6.1 ``"external" = 1 AND …``, and a database keeps the one it was migrated
under while another Django serves it. Nothing names an index (``INDEXED BY``), so a rendering
the query does not match would cost a sort, never an error. The same plans are read inside
real hosts on 6.0 and 6.1 (tests/embedding/test_install.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from resonate_project.engine import steps
from tests.embedding.plans import armed_index_sql, plan_problems, read_plans
from tests.support.factories import Api

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="SQLite's planner (PostgreSQL's proves the predicate)"
)

# promise_armed_timeout's condition (Q(state="pending", external=True)) as each Django writes it.
RENDERINGS = {
    "django-6.0": '"external" AND "state" = \'pending\'',
    "django-6.1": '"external" = 1 AND "state" = \'pending\'',
}


def test_this_django_writes_one_of_the_known_renderings(db: Any) -> None:
    """Else the query's condition needs the new one too (``steps._armed``)."""
    assert any(f"WHERE ({cond})" in armed_index_sql() for cond in RENDERINGS.values())


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_the_deadline_reads_use_the_partial_indexes(api: Api, rendering: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute('DROP INDEX "promise_armed_timeout"')
        cursor.execute(
            'CREATE INDEX "promise_armed_timeout" ON "promises_promise" ("timeout_at") '
            f"WHERE ({RENDERINGS[rendering]})"
        )
    res = api(
        "promise.create",
        now=1_000,
        id="t",
        timeoutAt=5_000,
        param={},
        tags={"resonate:timer": "true"},
    )
    assert res.status == 200, res
    assert plan_problems(read_plans()) == []
    assert steps.due_heads() == {steps.promise_timeouts: 5_000}
    assert steps.promise_timeouts(5_000, 100) == 1  # the sweep finds it through the index
