"""The production shape through PgBouncer in transaction pooling mode (issue 29, part 2).

Every server process (two web, two Celery workers, beat, ``migrate``) connects through a
PgBouncer of the test's own (``pool_mode = transaction``, 20 server connections) with
``DATABASE_POOLER=transaction``, in front of a private PostgreSQL cluster; under the SDK load
PostgreSQL restarts and a Celery worker is SIGKILLed. Afterwards the checker's guarantees hold as
in ``make chaos`` (tests/system/test_chaos_short.py): every workflow completed with its
result, no acknowledged write lost, no task with two holders, every unblock heard, the outbox
empty, no 500s. And the work went through the pooler: PostgreSQL saw PgBouncer's connections,
not one per client."""

from __future__ import annotations

import random
import shutil
import sys
import time
from pathlib import Path

import pytest

BENCH = str(Path(__file__).resolve().parents[2] / "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

from chaos.cluster import PG_BIN, Missing, sdk_python  # noqa: E402
from chaos.pooler import POOL_SIZE, SHORT, PoolerCluster, pgbouncer_binary  # noqa: E402
from chaos.run import execute  # noqa: E402

from .conftest import unavailable  # noqa: E402

pytestmark = pytest.mark.integration


def _unavailable(reason: str) -> None:
    unavailable("pooler", reason)


@pytest.fixture(scope="module")
def tools() -> None:
    if not (PG_BIN / "initdb").exists():
        _unavailable(f"no PostgreSQL server binaries at {PG_BIN} (set CHAOS_PG_BIN)")
    if shutil.which("redis-server") is None:
        _unavailable("redis-server is not on PATH")
    try:
        pgbouncer_binary()
        sdk_python()
    except Missing as exc:
        _unavailable(str(exc))


class Watched(PoolerCluster):
    """Counts, while the load runs, the most backends PostgreSQL had for the run's database."""

    most_backends = 0

    def wait_sdk(self, sdk: object, timeout: float = 60) -> None:
        super().wait_sdk(sdk, timeout)  # type: ignore[arg-type]
        self.sample()

    def close(self, keep: bool = False) -> None:
        self.sample()  # after the load, before anything stops: the pool as the run left it
        super().close(keep)

    def sample(self) -> None:
        import psycopg

        assert self.pg is not None
        with psycopg.connect(self.pg.url(), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.db,)
            ).fetchone()
        self.most_backends = max(self.most_backends, int(row[0]) if row else 0)


@pytest.mark.usefixtures("tools")
def test_through_pgbouncer_in_transaction_mode_nothing_is_lost() -> None:
    seed = random.randrange(1 << 16)
    began = time.monotonic()
    cluster = Watched(sdk_python())
    outcome = execute(SHORT, seed, cluster=cluster)
    took = time.monotonic() - began
    [figures] = outcome.figures
    assert outcome.ok(), f"seed {seed}:\n" + "\n".join(outcome.problems())
    assert [f.kind for f in figures.faults] == ["pg-fast", "worker-kill"]
    assert figures.started > 0
    assert figures.listeners > 0
    # Only PgBouncer's server connections reached the database (at most its pool per database
    # and user), however many clients the processes opened.
    assert 0 < cluster.most_backends <= POOL_SIZE
    assert took < 170, f"the pooler run took {took:.0f}s"
