"""A database failover under the SDK load (issue 29, part 3).

The run's PostgreSQL is a primary and a streaming standby (``initdb``, then ``pg_basebackup -R``
from the primary, each a cluster of our own on a free loopback port, run as ``postgres`` when we
are root). Every server process has both in its ``DATABASE_URL``, libpq's multi-host form with
``target_session_attrs=read-write``, so it reaches whichever of them accepts writes. Under the
load the harness stalls replication (SIGSTOP of the primary's WAL sender, as a congested link
would), then SIGKILLs the primary (every process of it at once, as a host dying) and promotes the
standby (``pg_ctl promote``, a second after the kill, as a failover manager would once it noticed).

Twice: with a synchronous standby (``synchronous_standby_names = '*'``: a commit returns once the
standby has the WAL) and with an asynchronous one. The checker then reads the promoted standby.

    .venv/bin/python -m bench.chaos.failover     # make chaos-failover: both cases, ~4 min;
                                                 # writes its table into reliability.md
    .venv/bin/python -m bench.chaos.failover --only sync --no-report

Exits 1 when the synchronous case fails a check (the asynchronous case is expected to lose the
writes of the stall and is reported, not judged), 2 when something it needs is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from .check import Fault
from .cluster import PG_BIN, Cluster, Missing, Postgres, free_port, log, sdk_python, wait_for
from .run import RECOVERY_LIMIT, REPORT, Outcome, Run, Scenario, execute, write_between

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "failover.json"

STALL_S = 2.0  # replication held back before the kill
DETECT_S = 1.0  # from the kill to ``pg_ctl promote``: a failover manager's detection time
WRITES = ("promise.create", "promise.settle", "promise.register_listener")


class Node(Postgres):
    """A cluster in ``workdir/name``: a primary made by ``initdb`` or a standby of one."""

    def __init__(self, workdir: Path, name: str) -> None:
        for tool in ("initdb", "pg_ctl", "pg_basebackup"):
            if not (PG_BIN / tool).exists():
                raise Missing(f"{PG_BIN / tool} not found (set CHAOS_PG_BIN)")
        self.name = name
        self.data = workdir / name
        self.port = free_port()
        self.data.mkdir(mode=0o700)
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres", "postgres")

    @classmethod
    def primary(cls, workdir: Path) -> Node:
        node = cls(workdir, "primary")
        node._run([str(PG_BIN / "initdb"), "-D", str(node.data), "-A", "trust", "-U", "postgres"])
        return node

    @classmethod
    def standby_of(cls, workdir: Path, primary: Node) -> Node:
        node = cls(workdir, "standby")
        argv = [str(PG_BIN / "pg_basebackup"), "-h", "127.0.0.1", "-p", str(primary.port)]
        argv += ["-U", "postgres", "-D", str(node.data), "-R", "-X", "stream", "-c", "fast"]
        node._run(argv)
        return node

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(statement)
            return cur.fetchall() if cur.description else []

    def processes(self) -> dict[int, str]:
        """The postmaster and its children: pid -> command line."""
        try:
            postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return {}
        found: dict[int, str] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError, IndexError):
                continue
            if int(entry.name) == postmaster or ppid == postmaster:
                found[int(entry.name)] = cmd
        return found

    def signal_all(self, sig: signal.Signals, match: str = "") -> list[int]:
        pids = [pid for pid, cmd in self.processes().items() if match in cmd]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    def crash(self) -> None:
        """Every process of the cluster stopped at once, then killed: a host that died."""
        self.signal_all(signal.SIGSTOP)
        self.signal_all(signal.SIGKILL)
        wait_for(lambda: not self.processes(), f"{self.name} to die", 30)

    def promote(self) -> None:
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60", "promote"])


class FailoverCluster(Cluster):
    """:class:`Cluster` on a primary and a standby, both in every server's ``DATABASE_URL``."""

    def __init__(self, sdk_python: Path, synchronous: bool) -> None:
        super().__init__(sdk_python)
        self.synchronous = synchronous
        self.primary: Node | None = None
        self.standby: Node | None = None

    def start_postgres(self) -> Postgres:
        primary = Node.primary(self.workdir)
        primary.start()
        standby = Node.standby_of(self.workdir, primary)
        standby.start()
        self.primary, self.standby = primary, standby
        if self.synchronous:
            primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
            primary.sql("SELECT pg_reload_conf()")
        want = "sync" if self.synchronous else "async"

        def replicating() -> bool:
            rows = primary.sql("SELECT state, sync_state FROM pg_stat_replication")
            return rows == [("streaming", want)]

        wait_for(replicating, f"the standby streaming ({want})", 60, 0.2)
        log(f"primary on {primary.port}, {want} standby on {standby.port}")
        return primary

    def server_environment(self) -> dict[str, str]:
        env = super().server_environment()
        assert self.primary is not None
        assert self.standby is not None
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        query = "target_session_attrs=read-write&connect_timeout=3"
        env["DATABASE_URL"] = f"postgresql://postgres@{hosts}/{self.db}?{query}"
        return env

    def failover(self) -> tuple[float, float]:
        """Stall replication, kill the primary, promote the standby: (kill, promoted) times."""
        assert self.primary is not None
        assert self.standby is not None
        stalled = self.primary.signal_all(signal.SIGSTOP, "walsender")
        time.sleep(STALL_S)
        killed = time.monotonic()
        self.primary.crash()
        time.sleep(DETECT_S)
        self.standby.promote()
        promoted = time.monotonic()
        self.pg = self.standby  # the checker reads the new primary
        log(
            f"  stalled {len(stalled)} WAL sender(s) {STALL_S:.0f}s, killed the primary, "
            f"promoted the standby {promoted - killed:.1f}s after the kill"
        )
        return killed, promoted

    def close(self, keep: bool = False) -> None:
        try:
            if self.shape is not None:
                for proc in reversed(self.shape.all()):
                    proc.stop()
            for node in (self.primary, self.standby):
                if node is not None and node is not self.pg:
                    node.shutdown()
        finally:
            super().close(keep)  # stops Redis and the cluster that is primary now


@dataclass
class Measured:
    """What the clients saw from the kill on."""

    killed: float = 0.0
    promoted: float = 0.0
    first_write_s: float | None = None  # kill -> first acknowledged write
    answered_503: int = 0
    answered_500: int = 0
    no_answer: int = 0


class FailoverRun(Run):
    measured: Measured

    def inject(self, kind: str) -> Fault:
        assert isinstance(self.cluster, FailoverCluster)
        fault = Fault(kind, time.monotonic())
        killed, promoted = self.cluster.failover()
        self.measured = Measured(killed, promoted)
        fault.end = promoted
        deadline = fault.end + RECOVERY_LIMIT
        while time.monotonic() < deadline:
            if self.driver.canary():
                fault.recovered = time.monotonic()
                break
            time.sleep(0.2)
        took = f"{fault.recovery_s:.1f}s" if fault.recovery_s is not None else "NOT recovered"
        log(f"  fault {kind}: full service {took} after the promotion")
        return fault

    def measure(self) -> Measured:
        m = self.measured
        with self.driver.seen.lock:
            after = [r for r in self.driver.seen.requests if r[0] >= m.killed]
        first = next((at for at, kind, st in after if st == 200 and kind in WRITES), None)
        m.first_write_s = None if first is None else first - m.killed
        until = first if first is not None else float("inf")
        between = [st for at, _, st in after if at <= until]
        m.answered_503 = between.count(503)
        m.no_answer = between.count(0)
        m.answered_500 = sum(1 for _, _, st in after if st == 500)
        return m


CASES = {
    "sync": Scenario("failover-sync", ("primary-kill",), 30, 0.8, 0.4),
    "async": Scenario("failover-async", ("primary-kill",), 30, 0.8, 0.4),
}


def run_case(name: str, seed: int, keep: bool) -> dict[str, Any]:
    cluster = FailoverCluster(sdk_python(), synchronous=name == "sync")
    runs: list[FailoverRun] = []

    class Recording(FailoverRun):
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            runs.append(self)

    outcome = execute((CASES[name],), seed, keep, cluster, run_class=Recording)
    measured = runs[0].measure() if runs and hasattr(runs[0], "measured") else Measured()
    return row(name, outcome, measured)


def row(name: str, outcome: Outcome, m: Measured) -> dict[str, Any]:
    result = outcome.json()
    [scenario] = result["scenarios"]
    [fig] = outcome.figures
    return {
        "standby": name,
        "ok": outcome.ok(),
        "seed": outcome.seed,
        "promoted_after_s": round(m.promoted - m.killed, 1),
        "first_write_after_kill_s": None if m.first_write_s is None else round(m.first_write_s, 1),
        "full_service_after_promotion_s": scenario["recovery_s_max"],
        "answered_503": m.answered_503,
        "no_answer": m.no_answer,
        "answered_500": m.answered_500,
        "workflows": scenario["workflows"],
        "acknowledged_writes": scenario["acknowledged_writes"],
        "lost_acknowledged_writes": scenario["lost_acknowledged_writes"],
        "lost": fig.lost_writes[:10],
        "duplicate_deliveries": scenario["duplicate_deliveries"],
        "server_errors": result["server_errors"],
        "problems": result["problems"][:20],
        "load_average": Path("/proc/loadavg").read_text().split()[:3],
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| fault | standby | promoted after the kill | first acknowledged write after the kill "
        "| full service after the promotion | errors seen until that write "
        "| 500s | duplicate deliveries | workflows completed / started "
        "| lost acknowledged writes |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        first = (
            "never"
            if r["first_write_after_kill_s"] is None
            else f"{r['first_write_after_kill_s']} s"
        )
        full = r["full_service_after_promotion_s"]
        lines.append(
            f"| primary SIGKILL after a {STALL_S:.0f} s replication stall | {r['standby']} "
            f"| {r['promoted_after_s']} s | {first} | {'never' if full is None else f'{full} s'} "
            f"| {r['answered_503']} answered 503, {r['no_answer']} unanswered "
            f"| {r['answered_500']} | {r['duplicate_deliveries']} | {r['workflows']} "
            f"| {r['lost_acknowledged_writes']} of {r['acknowledged_writes']} |"
        )
    load = rows[-1]["load_average"] if rows else []
    seeds = ", ".join(str(r["seed"]) for r in rows)
    tail = f"\nLoad average at the end: {' '.join(load)} (2 cores); seeds {seeds}.\n"
    return head + "\n".join(lines) + "\n" + tail


def write_report(rows: list[dict[str, Any]]) -> None:
    write_between("failover", table(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos.failover", description=__doc__)
    parser.add_argument("--only", default="sync,async", help="sync, async or both (the default)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directories and logs")
    parser.add_argument("--no-report", action="store_true", help="do not touch docs/")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 16)
    names = [n for n in ("sync", "async") if n in args.only.split(",")]
    rows = []
    try:
        for name in names:
            log(f"failover with {'a synchronous' if name == 'sync' else 'an asynchronous'} standby")
            rows.append(run_case(name, seed, args.keep))
            log(json.dumps(rows[-1]))
    except Missing as exc:
        log(f"cannot run: {exc}")
        return 2
    log("\n" + table(rows))
    if names == ["sync", "async"] and not args.no_report:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(rows, indent=2) + "\n")
        write_report(rows)
        log(f"wrote {REPORT.relative_to(ROOT)} and {RESULTS.relative_to(ROOT)}")
    sync = [r for r in rows if r["standby"] == "sync"]
    return 0 if all(r["ok"] for r in sync) else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
