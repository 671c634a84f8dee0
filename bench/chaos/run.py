"""Run the chaos scenarios: one fault kind at a time, then mixed; check; write the table.

    .venv/bin/python -m bench.chaos                 # the full run (~10 min): its report is
                                                    # docs/explanation/reliability.md
    .venv/bin/python -m bench.chaos --short         # one PostgreSQL restart + one worker SIGKILL
    .venv/bin/python -m bench.chaos --only pg-fast,worker-kill --keep

Exits 1 when any check fails (the table says which).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .check import Audit, Fault, Figures, audit, figures, sdk_500s, server_500s
from .cluster import Cluster, Missing, Proc, log, sdk_python
from .load import Driver

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "docs" / "explanation" / "reliability.md"
RESULTS = ROOT / "bench" / "results" / "chaos.json"

RECOVERY_LIMIT = 90.0  # seconds the canary may take to succeed after a fault ends
SETTLE_LIMIT = 150.0  # seconds the system gets to finish a scenario's work after its load stops
RECEIVER_DOWN_S = 30.0  # the issue says a minute; 30 s keeps the full run near 10 minutes


@dataclass(frozen=True)
class Scenario:
    name: str
    faults: tuple[str, ...]  # fault kinds, injected at random moments in order
    seconds: float  # how long the load runs
    workflow_every: float = 0.6
    listener_every: float = 0.3


FULL = (
    Scenario("baseline", (), 15),
    Scenario("pg-fast", ("pg-fast", "pg-fast"), 35),
    Scenario("pg-immediate", ("pg-immediate", "pg-immediate"), 35),
    Scenario("pg-outage", ("pg-outage",), 35),
    Scenario("web-kill", ("web-kill", "web-kill"), 30),
    Scenario("worker-kill", ("worker-kill", "worker-kill"), 30),
    Scenario("beat-kill", ("beat-kill", "beat-kill"), 30),
    Scenario("redis-restart", ("redis-restart", "redis-restart"), 30),
    Scenario("sdk-kill", ("sdk-kill", "sdk-kill"), 30),
    Scenario("receiver-down", ("receiver-down",), 45),
    Scenario(
        "mixed",
        ("pg-immediate", "web-kill", "worker-kill", "redis-restart", "sdk-kill", "beat-kill"),
        70,
    ),
)
SHORT = (Scenario("short", ("pg-fast", "worker-kill"), 30, 1.0, 0.5),)


class Run:
    def __init__(self, cluster: Cluster, driver: Driver, rng: random.Random) -> None:
        self.cluster = cluster
        self.driver = driver
        self.rng = rng
        shape = cluster.shape
        assert shape is not None
        self.shape = shape
        self.restarts: dict[str, int] = {}

    def more_actions(self) -> dict[str, Callable[[], None]]:
        """Further fault kinds, by name (bench/chaos/hosts_run.py's network faults)."""
        return {}

    def inject(self, kind: str) -> Fault:
        shape, cluster = self.shape, self.cluster
        fault = Fault(kind, time.monotonic())
        victims: list[str] = []
        actions: dict[str, Callable[[], None]] = {
            "pg-fast": lambda: cluster.pg_restart("fast"),
            "pg-immediate": lambda: cluster.pg_restart("immediate"),
            "pg-outage": lambda: cluster.pg_restart("fast", down_s=10),
            "redis-restart": lambda: cluster.redis_restart(1.0),
            **self.more_actions(),
        }
        if kind in actions:
            actions[kind]()
        elif kind == "receiver-down":
            self.driver.receiver.stop()
            time.sleep(RECEIVER_DOWN_S)
            self.driver.receiver.start()
        else:
            pools: dict[str, list[Proc | None]] = {
                "web-kill": [self.rng.choice(shape.webs)],
                "worker-kill": [self.rng.choice(shape.workers)],
                "beat-kill": [shape.beat],
                "sdk-kill": [
                    self.rng.choice([p for p in shape.sdks if p.name.startswith("sdk-a")]),
                    self.rng.choice([p for p in shape.sdks if p.name.startswith("sdk-b")]),
                ],
            }
            procs = [p for p in pools[kind] if p is not None]
            for proc in procs:
                proc.kill()
                victims.append(proc.name)
            time.sleep(2.0 if kind == "beat-kill" else 1.0)
            for proc in procs:
                self.restarts[proc.name] = self.restarts.get(proc.name, 0) + 1
                cluster.restart(proc, down_s=0)
        fault.end = time.monotonic()
        what = f" ({', '.join(victims)})" if victims else ""
        # Full service: both web processes answer and a settlement's push and SSE unblocks
        # arrive, with nothing restarted but what the fault itself killed.
        deadline = fault.end + RECOVERY_LIMIT
        failures: list[str] = []
        while time.monotonic() < deadline:
            if self.driver.canary():
                fault.recovered = time.monotonic()
                break
            failures.append(f"{time.monotonic() - fault.end:.1f}s {self.driver.canary_failure}")
            time.sleep(0.2)
        took = f"{fault.recovery_s:.1f}s" if fault.recovery_s is not None else "NOT recovered"
        log(f"  fault {kind}{what}: {fault.end - fault.start:.1f}s, full service after {took}")
        for failure in failures[-5:]:
            log(f"    canary: {failure}")
        if fault.recovered is not None:
            log(f"    canary: {self.driver.canary_detail}")
        return fault

    def scenario(self, sc: Scenario) -> Figures:
        log(f"scenario {sc.name}: {sc.seconds:.0f}s of load, faults {list(sc.faults)}")
        start = time.monotonic()
        phase = self.driver.phase(sc.name, sc.workflow_every, sc.listener_every)
        # Random moments, in order, at least 3 s apart and leaving the last 5 s fault-free.
        slots = len(sc.faults)
        moments = sorted(self.rng.uniform(3, max(4.0, sc.seconds - 5)) for _ in range(slots))
        faults = []
        for kind, at in zip(sc.faults, moments, strict=True):
            time.sleep(max(0.0, start + at - time.monotonic()))
            faults.append(self.inject(kind))
        time.sleep(max(0.0, start + sc.seconds - time.monotonic()))
        self.driver.quiet(phase)
        settled = self.settle(sc.name)
        log(f"  load stopped; settled in {settled:.1f}s")
        fig = figures(sc.name, self.driver.seen, faults, (start, time.monotonic()), self.records)
        log(f"  {json.dumps(fig.row())}")
        for problem in [*fig.wrong_results, *fig.lost_writes, *fig.never_unblocked][:20]:
            log(f"  PROBLEM {problem}")
        return fig

    def settle(self, scenario: str) -> float:
        """Wait (bounded) until the scenario's workflows completed and its listeners heard."""
        seen = self.driver.seen
        start = time.monotonic()
        time.sleep(3.5)  # the last listener promises are settled up to 3 s after their creation
        while time.monotonic() - start < SETTLE_LIMIT:
            with seen.lock:
                waiting = [w for w, v in seen.workflows.items() if w not in seen.completed]
                deaf = [
                    k for k, s in seen.listeners.items() if s == scenario and not seen.unblocks[k]
                ]
                pending = len(self.driver.tasks) - self.driver.background
            if not waiting and not deaf and pending <= 0:
                break
            time.sleep(0.5)
        return time.monotonic() - start

    def records(self, ids: list[str]) -> dict[str, Any]:
        """Promise records through ``POST /`` (None: not found)."""

        async def read() -> dict[str, Any]:
            found: dict[str, Any] = {}
            for pid in ids:
                status, reply = await self.driver.persist("promise.get", {"id": pid}, (200, 404))
                found[pid] = reply["promise"] if status == 200 else None
            return found

        return self.driver.call_soon(read(), timeout=600)

    def wait_outbox(self, limit: float = 60) -> Audit:
        assert self.cluster.pg is not None
        url = self.cluster.pg.url(self.cluster.db)
        deadline = time.monotonic() + limit
        result = audit(url)
        while result.outbox_left and time.monotonic() < deadline:
            time.sleep(1)
            result = audit(url)
        return result


@dataclass
class Outcome:
    figures: list[Figures]
    audit: Audit
    server_errors: dict[str, int]
    sdk_500s: int
    dead: list[str]
    seconds: float
    seed: int

    def ok(self) -> bool:
        return (
            all(f.ok() for f in self.figures)
            and not self.audit.holder_violations
            and not self.audit.settled_changes
            and self.audit.outbox_left == 0
            and self.audit.stale_registrations == 0
            and not any(k.startswith("status") for k in self.server_errors)
            and self.sdk_500s == 0
            and not self.dead
        )

    def problems(self) -> list[str]:
        out = []
        for f in self.figures:
            if not f.ok():
                out.append(f"{f.scenario}: {json.dumps(f.row())}")
            out += [f"{f.scenario}: {p}" for p in f.wrong_results + f.lost_writes]
            out += [f"{f.scenario}: never unblocked {p}" for p in f.never_unblocked]
        out += self.audit.holder_violations + self.audit.settled_changes
        if self.audit.outbox_left:
            out.append(f"outbox not empty: {self.audit.outbox_left} rows")
        if self.audit.stale_registrations:
            out.append(f"{self.audit.stale_registrations} stream registrations of dead processes")
        out += [
            f"server: {k} x{v}" for k, v in self.server_errors.items() if k.startswith("status")
        ]
        if self.sdk_500s:
            out.append(f"SDK workers saw {self.sdk_500s} 500s")
        out += [f"process not running at the end: {name}" for name in self.dead]
        return out

    def json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "seconds": round(self.seconds),
            "ok": self.ok(),
            "scenarios": [f.row() for f in self.figures],
            "recoveries": {
                f.scenario: [
                    [x.kind, round(x.recovery_s, 1) if x.recovery_s is not None else None]
                    for x in f.faults
                ]
                for f in self.figures
            },
            "audit": {
                "task_transitions": self.audit.task_transitions,
                "acquires": self.audit.acquires,
                "lease_expiries": self.audit.lease_expiries,
                "fulfills": self.audit.fulfills,
                "holder_violations": len(self.audit.holder_violations),
                "settled_promise_changes": len(self.audit.settled_changes),
                "outbox_left": self.audit.outbox_left,
                "outbox_dead": self.audit.outbox_dead,
                "stale_registrations": self.audit.stale_registrations,
            },
            "server_errors": self.server_errors,
            "sdk_500s": self.sdk_500s,
            "processes_not_running": self.dead,
            "problems": self.problems(),
        }


def execute(
    scenarios: tuple[Scenario, ...],
    seed: int,
    keep: bool = False,
    cluster: Cluster | None = None,
    run_class: type[Run] | None = None,
) -> Outcome:
    """Start everything (``cluster``, by default a plain one), run ``scenarios``, check, stop
    everything (also on failure)."""
    began = time.monotonic()
    rng = random.Random(seed)
    cluster = cluster if cluster is not None else Cluster(sdk_python())
    driver: Driver | None = None
    try:
        shape = cluster.start()
        driver = Driver(shape.urls(), shape.token, seed)
        deadline = time.monotonic() + 60
        while not driver.canary():
            if time.monotonic() > deadline:
                raise RuntimeError("the service never answered the canary before the faults")
            time.sleep(0.5)
        run = (run_class or Run)(cluster, driver, rng)
        results = [run.scenario(sc) for sc in scenarios]
        final = run.wait_outbox()
        webs = [p for w in shape.webs for p in w.logs()]
        errors = dict(server_500s(webs))
        sdk = sdk_500s([p for s in shape.sdks for p in s.logs()])
        dead = [p.name for p in shape.all() if not p.alive()]
        if not cluster.pg or not cluster.pg.running():
            dead.append("postgresql")
        return Outcome(results, final, errors, sdk, dead, time.monotonic() - began, seed)
    finally:
        if driver is not None:
            driver.close()
        cluster.close(keep=keep)


# --- the report ----------------------------------------------------------------------------------


def table(result: dict[str, Any]) -> str:
    head = (
        "| scenario | faults | workflows completed / started | lost acknowledged writes "
        "| listeners never unblocked / registered | duplicate deliveries | requests succeed again "
        "after the fault (max) | full service after the fault (max) "
        "| max error rate during the fault | client 500s |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for row in result["scenarios"]:
        faults = ", ".join(row["faults"]) or "none"
        recovery = "—" if row["recovery_s_max"] is None else f"{row['recovery_s_max']} s"
        answering = "—" if row["answering_s_max"] is None else f"{row['answering_s_max']} s"
        if row["unrecovered_faults"]:
            recovery = f"{row['unrecovered_faults']} never"
        rows.append(
            f"| {row['scenario']} | {faults} | {row['workflows']} "
            f"| {row['lost_acknowledged_writes']} of {row['acknowledged_writes']} "
            f"| {row['never_unblocked']} / {row['listeners']} | {row['duplicate_deliveries']} "
            f"| {answering} | {recovery} | {row['max_error_rate'] * 100:.0f} % "
            f"| {row['client_500s']} |"
        )
    a = result["audit"]
    server = sum(v for k, v in result["server_errors"].items() if k.startswith("status"))
    tail = (
        f"\nRun of {result['seconds']} s, seed {result['seed']}: "
        f"{'every check passed' if result['ok'] else 'CHECKS FAILED'}. "
        f"Task audit: {a['acquires']} acquisitions, {a['lease_expiries']} lease expiries, "
        f"{a['fulfills']} fulfilments, {a['holder_violations']} times two holders; "
        f"{a['settled_promise_changes']} changes to settled promises; outbox left "
        f"{a['outbox_left']} rows ({a['outbox_dead']} dead letters); "
        f"{a['stale_registrations']} stream registrations of dead processes. "
        f"Server 5xx other than 503: {server}; "
        f"SDK workers saw {result['sdk_500s']} 500s; processes not running at the end: "
        f"{', '.join(result['processes_not_running']) or 'none'}.\n"
    )
    return head + "\n".join(rows) + "\n" + tail


def write_between(name: str, body: str) -> None:
    """Put ``body`` between reliability.md's ``<!-- NAME:table -->`` markers (every chaos run's
    table lives there: chaos, failover, hosts, hosts-pg, pooler)."""
    start, end = f"<!-- {name}:table -->", f"<!-- /{name}:table -->"
    text = REPORT.read_text()
    if start not in text:
        raise RuntimeError(f"{REPORT} has no {start} marker")
    before, _, rest = text.partition(start)
    _, _, after = rest.partition(end)
    REPORT.write_text(f"{before}{start}\n{body}{end}{after}")


def write_report(result: dict[str, Any]) -> None:
    write_between("chaos", table(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the ~2 minute variant")
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the work directory and logs")
    parser.add_argument("--no-report", action="store_true", help="do not touch docs/")
    args = parser.parse_args(argv)
    scenarios: tuple[Scenario, ...] = SHORT if args.short else FULL
    if args.only:
        names = set(args.only.split(","))
        scenarios = tuple(s for s in FULL + SHORT if s.name in names)
    seed = args.seed if args.seed is not None else random.randrange(1 << 16)
    try:
        outcome = execute(scenarios, seed, keep=args.keep)
    except Missing as exc:
        log(f"cannot run: {exc}")
        return 2
    result = outcome.json()
    log("\n" + table(result))
    for problem in result["problems"]:
        log(f"PROBLEM {problem}")
    if not args.short and not args.only and not args.no_report:
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
        write_report(result)
        log(f"wrote {REPORT.relative_to(ROOT)} and {RESULTS.relative_to(ROOT)}")
    return 0 if outcome.ok() else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
