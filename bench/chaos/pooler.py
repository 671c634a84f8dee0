"""The production shape through PgBouncer in transaction pooling mode (issue 29, part 2).

A PgBouncer of our own (Debian's ``pgbouncer`` binary, run as ``postgres`` when we are root: it
refuses root) listens on a free loopback port in front of the run's private PostgreSQL cluster;
every server process (web, Celery worker and beat, ``migrate`` and ``credentials create``) connects
through it with ``DATABASE_POOLER=transaction``. The checker reads the cluster directly.

    .venv/bin/python -m bench.chaos.pooler            # make chaos-pooler: two rounds, ~3 min
    .venv/bin/python -m bench.chaos.pooler --short    # one round (tests/system/test_pooler.py)

Exits 1 when a check fails, 2 when something it needs is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import socket
import sys
from pathlib import Path

from .cluster import Cluster, Missing, Proc, _as_postgres, free_port, log, sdk_python, wait_for
from .run import REPORT, ROOT, Scenario, execute, table, write_between

# Server connections PgBouncer keeps per database and user: far fewer than the clients (two web
# processes' threads and loop connections, two Celery workers, beat), which is the point.
POOL_SIZE = 20

ROUNDS = (
    Scenario("pooler", ("pg-fast", "web-kill", "worker-kill"), 40, 0.8, 0.4),
    Scenario("pooler-mixed", ("pg-immediate", "redis-restart", "sdk-kill"), 40, 0.8, 0.4),
)
SHORT = (Scenario("pooler-short", ("pg-fast", "worker-kill"), 30, 1.0, 0.5),)


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/sbin")
    if found is None:
        raise Missing("pgbouncer not found (make pgbouncer installs Debian's package)")
    return found


def config(port: int, pg_port: int, workdir: Path) -> str:
    """pgbouncer.ini: transaction pooling, every database of the cluster, loopback only.

    ``server_login_retry`` 1 s (default 15 s): after PostgreSQL restarts, the pooler tries it
    again within a second. ``query_wait_timeout`` 30 s (default 120 s): a client waiting for a
    server connection gets an error, answered 503, instead of hanging past its own timeout."""
    return "\n".join(
        [
            "[databases]",
            f"* = host=127.0.0.1 port={pg_port}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {workdir / 'userlist.txt'}",
            "pool_mode = transaction",
            f"default_pool_size = {POOL_SIZE}",
            "max_client_conn = 1000",
            "server_login_retry = 1",
            "query_wait_timeout = 30",
            "ignore_startup_parameters = extra_float_digits",
            f"logfile = {workdir / 'pgbouncer.log'}",
            f"pidfile = {workdir / 'pgbouncer.pid'}",
            "",
        ]
    )


class PgBouncer:
    """Our own PgBouncer process in front of a private cluster (never a system service)."""

    def __init__(self, workdir: Path, pg_port: int) -> None:
        self.binary = pgbouncer_binary()
        self.dir = workdir / "pgbouncer"
        self.dir.mkdir()
        self.port = free_port()
        (self.dir / "userlist.txt").write_text('"postgres" ""\n')
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(config(self.port, pg_port, self.dir))
        if os.geteuid() == 0:
            for path in (self.dir, *self.dir.iterdir()):
                shutil.chown(path, "postgres", "postgres")
        argv = _as_postgres([self.binary, str(ini)])
        self.proc = Proc("pgbouncer", argv, dict(os.environ), workdir)

    def url(self, db: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.proc.start()

        def up() -> bool:
            if not self.proc.alive():
                raise RuntimeError(f"pgbouncer exited:\n{self.proc.tail()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1),
            ):
                return True
            return False

        wait_for(up, "pgbouncer", 30)

    def stop(self) -> None:
        self.proc.stop()


class PoolerCluster(Cluster):
    """:class:`Cluster` whose server processes reach PostgreSQL through :class:`PgBouncer`."""

    def __init__(self, sdk_python: Path, sdk_workers_per_group: int = 2) -> None:
        pgbouncer_binary()  # Missing before anything starts
        super().__init__(sdk_python, sdk_workers_per_group)
        self.bouncer: PgBouncer | None = None

    def server_environment(self) -> dict[str, str]:
        env = super().server_environment()
        assert self.pg is not None
        self.bouncer = PgBouncer(self.workdir, self.pg.port)
        self.bouncer.start()
        log(f"PgBouncer on {self.bouncer.port} (transaction pooling, {POOL_SIZE} server conns)")
        env["DATABASE_URL"] = self.bouncer.url(self.db)
        env["DATABASE_POOLER"] = "transaction"
        return env

    def close(self, keep: bool = False) -> None:
        try:
            if self.shape is not None:
                for proc in reversed(self.shape.all()):
                    proc.stop()
            if self.bouncer is not None:
                self.bouncer.stop()
        finally:
            super().close(keep)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos.pooler", description=__doc__)
    parser.add_argument("--short", action="store_true", help="one round (~1.5 min)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory and logs")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 16)
    try:
        outcome = execute(
            SHORT if args.short else ROUNDS, seed, args.keep, PoolerCluster(sdk_python())
        )
    except Missing as exc:
        log(f"cannot run: {exc}")
        return 2
    result = outcome.json()
    log("\n" + table(result))
    for problem in result["problems"]:
        log(f"PROBLEM {problem}")
    if not args.short:
        write_between("pooler", table(result))
        log(f"wrote {REPORT.relative_to(ROOT)}")
    return 0 if outcome.ok() else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
