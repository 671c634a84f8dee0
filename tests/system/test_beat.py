"""Celery beat started the ways an operator starts it: the production guide's command, the
scheduler flag that used to replace ours, and a scheduler that cannot work (beat refuses it)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.docs_blocks import block

from .conftest import production_stack, require_services
from .harness import (
    CELERY,
    PG_URL,
    REDIS_URL,
    ROOT,
    Stack,
    base_env,
    migrate,
    now_ms,
    spawn,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration


def production_beat() -> list[str]:
    """The production guide's beat command (docs/how-to/production.md), after ``celery``."""
    lines = block("docs/how-to/production.md", "production-processes").lines()
    (line,) = [line for line in lines if line.startswith("celery -A resonate_project beat")]
    return line.split()[1:]


# The production guide's command, word for word, and the flag older READMEs showed.
PRODUCTION_BEAT = production_beat()
assert PRODUCTION_BEAT[:2] == ["-A", "resonate_project"], PRODUCTION_BEAT
README_BEAT = PRODUCTION_BEAT[2:]
DATABASE_SCHEDULER = ["-S", "django_celery_beat.schedulers:DatabaseScheduler"]


@pytest.fixture
def shape(tmp_path: Path) -> Iterator[Stack]:
    """PostgreSQL, Redis, a web process and a Celery worker; each test starts beat its way."""
    with production_stack(tmp_path, {}, beat=False) as stack:
        yield stack


def stored_state(stack: Stack, id: str) -> str:
    with psycopg.connect(PG_URL.format(name=stack.outbox.pg_name), autocommit=True) as conn:
        row = conn.execute("SELECT state FROM promises_promise WHERE id = %s", (id,)).fetchone()
    return str(row[0]) if row else ""


def start_beat(stack: Stack, *flags: str) -> None:
    argv = [CELERY, "-A", "resonate_project", *README_BEAT, *flags]
    argv += ["--pidfile", str(stack.logdir / "beat.pid")]
    argv += ["--schedule", str(stack.logdir / "beat-schedule")]
    stack.procs["beat"] = spawn("beat", argv, stack.env, stack.logdir)


@pytest.mark.parametrize(
    "flags", [[], DATABASE_SCHEDULER], ids=["documented", "database-scheduler"]
)
def test_beat_fires_timeouts_whichever_database_scheduler(shape: Stack, flags: list[str]) -> None:
    """Finding: with -S ...DatabaseScheduler (as the README said), no timeout ever fired."""
    id = unique("beat")
    shape.ok("promise.create", id=id, timeoutAt=now_ms() + 500, tags={"resonate:external": "true"})
    start_beat(shape, *flags)
    # The stored row (not the projected view) changes only when the timeout step ran.
    wait_until(
        lambda: stored_state(shape, id) == "rejected_timedout", "the timeout step", logs=shape
    )


def test_beat_refuses_a_scheduler_that_never_ticks(tmp_path: Path) -> None:
    require_services()
    env = base_env("sqlite:///" + str(tmp_path / "db.sqlite3"), REDIS_URL, {})
    migrate(env)
    flags = ["-S", "celery.beat:PersistentScheduler", "--schedule", str(tmp_path / "schedule")]
    done = subprocess.run(
        [CELERY, "-A", "resonate_project", *README_BEAT, *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "no timer, timeout, retry or schedule would fire" in done.stdout + done.stderr
