"""SQLite's query plans for the steps' deadline reads, as the running code sends them: the four
probes of ``steps.due_heads`` and R1's sweep (``steps.promise_timeouts``). Imports only Django and
the apps, so a host site runs this file too (tests/embedding: ``manage.py shell``, on the Django
it has, against the database it migrated, whichever Django that was)."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from resonate_project.engine import steps

# Each deadline read and the partial indexes its plan must use (models' Meta.indexes).
WANTED = {
    "due_heads": ["promise_armed_timeout", "schedule_due", "task_due_lease", "task_due_retry"],
    "sweep": ["promise_armed_timeout"],
}


def read_plans() -> dict[str, list[str]]:
    """``EXPLAIN QUERY PLAN``'s lines for ``due_heads``' statement and R1's sweep (at ``now`` 0,
    so it settles nothing)."""
    with CaptureQueriesContext(connection) as sent:
        steps.due_heads()
        steps.promise_timeouts(0, 100)
    found: dict[str, str] = {}
    for query in sent.captured_queries:
        sql = query["sql"]
        if sql.startswith("SELECT (SELECT"):
            found["due_heads"] = sql
        elif 'FROM "promises_promise"' in sql and 'ORDER BY "timeout_at"' in sql:
            found["sweep"] = sql
    assert set(found) == set(WANTED), [q["sql"][:200] for q in sent.captured_queries]
    plans = {}
    with connection.cursor() as cursor:
        for name, sql in found.items():
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}")
            plans[name] = [str(row[3]) for row in cursor.fetchall()]
    return plans


def plan_problems(plans: dict[str, list[str]]) -> list[str]:
    """What is wrong with ``plans``: a partial index unused, or a sort (every pending row read)."""
    problems = []
    for name, indexes in WANTED.items():
        lines = plans[name]
        problems += [
            f"{name}: no {index} in {lines}"
            for index in indexes
            if not any(f"USING INDEX {index}" in line for line in lines)
        ]
        problems += [f"{name}: sorts ({line})" for line in lines if "TEMP B-TREE" in line]
    return problems


def armed_index_sql() -> str:
    """``promise_armed_timeout`` as the database holds it (as the Django that migrated it wrote)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'promise_armed_timeout'")
        return str(cursor.fetchone()[0])
