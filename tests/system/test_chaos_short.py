"""The short chaos run (``make chaos``'s little sibling, issue 13): under light load, one
PostgreSQL restart and one SIGKILL of a Celery worker, on the production shape with its own
PostgreSQL cluster and Redis server (bench/chaos; the machine's shared services are not touched).

Afterwards every workflow started has completed with its expected result, every write answered
200 is there with its value, no settled promise changed, no task had two holders, every listener
registered before its promise settled heard its ``unblock`` (push and SSE), the outbox is empty,
no client or SDK worker saw a 500, and nothing but the killed worker needed a restart."""

from __future__ import annotations

import random
import shutil
import sys
import time
from pathlib import Path

import pytest

# bench/ is a directory of scripts, not a package: its chaos package is imported from there.
BENCH = str(Path(__file__).resolve().parents[2] / "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

from chaos.cluster import PG_BIN, Missing, sdk_python  # noqa: E402
from chaos.run import SHORT, execute  # noqa: E402

from .conftest import unavailable  # noqa: E402

pytestmark = pytest.mark.integration


def _unavailable(reason: str) -> None:
    unavailable("chaos", reason)


@pytest.fixture(scope="module")
def tools() -> None:
    if not (PG_BIN / "initdb").exists():
        _unavailable(f"no PostgreSQL server binaries at {PG_BIN} (set CHAOS_PG_BIN)")
    if shutil.which("redis-server") is None:
        _unavailable("redis-server is not on PATH")
    try:
        sdk_python()
    except Missing as exc:
        _unavailable(str(exc))


@pytest.mark.usefixtures("tools")
def test_a_postgres_restart_and_a_worker_kill_lose_nothing() -> None:
    seed = random.randrange(1 << 16)
    began = time.monotonic()
    outcome = execute(SHORT, seed)
    took = time.monotonic() - began
    [figures] = outcome.figures
    assert outcome.ok(), f"seed {seed}:\n" + "\n".join(outcome.problems())
    assert [f.kind for f in figures.faults] == ["pg-fast", "worker-kill"]
    assert figures.started > 0
    assert figures.listeners > 0
    assert took < 170, f"the short run took {took:.0f}s"
