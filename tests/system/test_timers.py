"""A timer fires at its deadline, not at the next tick, in both shapes: the embedded server (its
runner thread is woken by the commit) and Celery without beat (a ``resonate.tick`` is planned for
the deadline). The tick is a minute, longer than any wait here, so nothing else could fire it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from .conftest import embedded_stack, production_stack
from .harness import (
    PG_URL,
    Stack,
    now_ms,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

LONG_TICK = {"RESONATE_TICK_INTERVAL_MS": "60000"}


@pytest.fixture
def embedded_long_tick(tmp_path: Path) -> Iterator[Stack]:
    with embedded_stack(tmp_path, LONG_TICK) as stack:
        yield stack


@pytest.fixture
def celery_without_beat(tmp_path: Path) -> Iterator[Stack]:
    with production_stack(tmp_path, LONG_TICK, beat=False) as stack:
        yield stack


def stored_state(stack: Stack, id: str) -> str:
    """The stored row (the projected view reads as settled at the deadline whether or not the
    timeout step ran)."""
    sql = "SELECT state FROM promises_promise WHERE id = "
    if stack.outbox.pg_name is not None:
        with psycopg.connect(PG_URL.format(name=stack.outbox.pg_name), autocommit=True) as conn:
            row = conn.execute(sql + "%s", (id,)).fetchone()
    else:
        assert stack.outbox.sqlite_path is not None
        lite = sqlite3.connect(stack.outbox.sqlite_path, timeout=30)
        try:
            row = lite.execute(sql + "?", (id,)).fetchone()
        finally:
            lite.close()
    return str(row[0]) if row else ""


def fires_at_its_deadline(stack: Stack) -> None:
    # The server answered /ready, so its first pass is over: it sleeps on to the minute's tick.
    timer, timeout = unique("timer"), unique("timeout")
    stack.ok("promise.create", id=timer, timeoutAt=now_ms() + 300, tags={"resonate:timer": "true"})
    stack.ok(
        "promise.create", id=timeout, timeoutAt=now_ms() + 600, tags={"resonate:external": "true"}
    )
    wait_until(lambda: stored_state(stack, timer) == "resolved", "the timer", logs=stack)
    timed_out = "rejected_timedout"
    wait_until(lambda: stored_state(stack, timeout) == timed_out, "the timeout", logs=stack)


def test_the_embedded_runner_wakes_at_a_deadline_before_its_tick(
    embedded_long_tick: Stack,
) -> None:
    fires_at_its_deadline(embedded_long_tick)


def test_celery_plans_a_tick_for_a_deadline_before_beats(celery_without_beat: Stack) -> None:
    fires_at_its_deadline(celery_without_beat)
