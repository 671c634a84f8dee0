"""``make chaos-hosts`` and ``make chaos-hosts-pg``: the chaos rounds with each part on its own
host (bench/chaos/hosts.py), each checked as ``make chaos`` is (bench/chaos/check.py).

    .venv/bin/python -m bench.chaos.hosts_run            # make chaos-hosts: the Celery shape
    .venv/bin/python -m bench.chaos.hosts_run --pg-only  # make chaos-hosts-pg: no Redis, no Celery
    .venv/bin/python -m bench.chaos.hosts_run --short    # tests/system/test_hosts.py

Faults across hosts: ``web-cut`` (web1's link down: cut off from the database, the SDK host on it
and the clients), ``worker-partition`` (the worker host's link down while the outbox drains),
``redis-partition``, ``clock-step`` (the worker host's clock +2 s, then -2 s, then back; simulated
through resonate_project/core/clock.py's test-only hook, since a time namespace cannot offset the
wall clock) and ``clock-step-web`` (the same on web2, in the PostgreSQL-alone shape). The full
runs write their table into docs/explanation/reliability.md. Exits 1 when a check fails, 2 when
the machine cannot run it.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .check import Figures, sdk_500s, server_500s
from .cluster import Missing, log, sdk_python
from .hosts import ADDRESSES, HostsCluster, Network, address, require
from .load import Driver
from .run import REPORT, Outcome, Run, Scenario, write_between

ROOT = Path(__file__).resolve().parents[2]
CUT_S = 10.0
CLOCK_HOLD_S = 8.0

FULL = (
    Scenario("hosts-baseline", (), 15),
    Scenario("web-cut", ("web-cut", "web-cut"), 40),
    Scenario("worker-partition", ("worker-partition", "worker-partition"), 40),
    Scenario("redis-partition", ("redis-partition", "redis-partition"), 40),
    Scenario("clock-step", ("clock-step",), 35),
)
PG_ONLY = (
    Scenario("pg-only-baseline", (), 15),
    Scenario("pg-only-web-cut", ("web-cut", "web-cut"), 40),
    Scenario("pg-only-clock-step", ("clock-step-web",), 35),
)
# tests/system/test_hosts.py: one round, a web host cut off and the worker host's clock
# stepped, ~1.5 min.
SHORT = (Scenario("hosts-short", ("web-cut", "clock-step"), 40, 1.0, 0.5),)


class HostsRun(Run):
    cluster: HostsCluster

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.errors: dict[str, dict[str, int]] = {}  # scenario -> failed requests by status

    def scenario(self, sc: Scenario) -> Figures:
        """The round, and the requests that failed from each fault's start to its recovery
        (status 0: no answer, within the driver's timeout)."""
        fig = super().scenario(sc)
        with self.driver.seen.lock:
            requests = list(self.driver.seen.requests)
        errors: Counter[str] = Counter()
        for fault in fig.faults:
            until = fault.recovered if fault.recovered is not None else time.monotonic()
            for at, _, status in requests:
                if fault.start <= at <= until and (status == 0 or status >= 500):
                    errors["no answer" if status == 0 else str(status)] += 1
        self.errors[sc.name] = dict(errors)
        return fig

    def more_actions(self) -> dict[str, Callable[[], None]]:
        net = self.cluster.net

        def partition(host: str) -> Callable[[], None]:
            def act() -> None:
                net.cut(host)
                time.sleep(CUT_S)
                net.restore(host)

            return act

        def mid_drain() -> None:
            # Wait (bounded) for rows in the outbox, then cut the worker host off.
            import psycopg

            assert self.cluster.pg is not None
            deadline = time.monotonic() + 5
            rows = 0
            with psycopg.connect(self.cluster.pg.url(self.cluster.db), autocommit=True) as conn:
                while time.monotonic() < deadline:
                    row = conn.execute("SELECT count(*) FROM outbox_message").fetchone()
                    rows = int(row[0]) if row else 0
                    if rows:
                        break
                    time.sleep(0.05)
            log(f"  the outbox holds {rows} messages: the worker host is cut off")
            partition("worker")()

        def clock(host: str) -> Callable[[], None]:
            def act() -> None:
                for offset in (2000, -2000, 0):
                    self.cluster.step_clock(host, offset)
                    time.sleep(CLOCK_HOLD_S if offset else 0.0)

            return act

        return {
            "web-cut": partition("web1"),
            "worker-partition": mid_drain,
            "redis-partition": partition("redis"),
            "clock-step": clock("worker"),
            "clock-step-web": clock("web2"),
        }


def execute(
    scenarios: tuple[Scenario, ...], seed: int, pg_only: bool, keep: bool
) -> tuple[Outcome, dict[str, Any]]:
    """Create the hosts, start the shape on them, run ``scenarios``, check; remove everything
    (also on failure). Returns the outcome and its result, with the errors seen per round."""
    began = time.monotonic()
    rng = random.Random(seed)
    require()
    python = sdk_python()  # before entering a namespace: it may set up its virtualenv
    hosts = [h for h in ADDRESSES if not (pg_only and h in {"worker", "redis"})]
    net = Network(hosts)
    cluster: HostsCluster | None = None
    driver: Driver | None = None
    try:
        net.create()
        net.enter("client")
        cluster = HostsCluster(python, net, pg_only=pg_only)
        shape = cluster.start()
        driver = Driver(shape.urls(), shape.token, seed, receiver_host=address("client"))
        deadline = time.monotonic() + 60
        while not driver.canary():
            if time.monotonic() > deadline:
                raise RuntimeError("the service never answered the canary before the faults")
            time.sleep(0.5)
        run = HostsRun(cluster, driver, rng)
        results = [run.scenario(sc) for sc in scenarios]
        final = run.wait_outbox()
        errors = dict(server_500s([p for w in shape.webs for p in w.logs()]))
        sdk = sdk_500s([p for s in shape.sdks for p in s.logs()])
        dead = [p.name for p in shape.all() if not p.alive()]
        if not cluster.pg or not cluster.pg.running():
            dead.append("postgresql")
        outcome = Outcome(results, final, errors, sdk, dead, time.monotonic() - began, seed)
        result = outcome.json()
        result["shape"] = "postgresql-alone" if pg_only else "celery"
        result["errors_seen"] = run.errors
        result["load_average"] = Path("/proc/loadavg").read_text().split()[:3]
        return outcome, result
    finally:
        if driver is not None:
            driver.close()
        if cluster is not None:
            cluster.close(keep=keep)
        net.destroy()


FAULTS = {
    "web-cut": f"web1's link down {CUT_S:.0f} s",
    "worker-partition": f"the worker host's link down {CUT_S:.0f} s, mid-drain",
    "redis-partition": f"the Redis host's link down {CUT_S:.0f} s",
    "clock-step": f"the worker host's clock +2 s, then -2 s ({CLOCK_HOLD_S:.0f} s each)",
    "clock-step-web": f"web2's clock +2 s, then -2 s ({CLOCK_HOLD_S:.0f} s each)",
}


def table(result: dict[str, Any]) -> str:
    head = (
        "| round | fault | full service after the fault (max) | errors seen "
        "| duplicate deliveries | workflows completed / started | lost acknowledged writes "
        "| client 500s |\n|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for row in result["scenarios"]:
        kinds = list(dict.fromkeys(row["faults"]))
        fault = "; ".join(
            FAULTS.get(k, k) + (f", x{n}" if (n := row["faults"].count(k)) > 1 else "")
            for k in kinds
        )
        recovery = "—" if row["recovery_s_max"] is None else f"{row['recovery_s_max']} s"
        if row["unrecovered_faults"]:
            recovery = f"{row['unrecovered_faults']} never"
        seen = result.get("errors_seen", {}).get(row["scenario"], {})
        errors = ", ".join(f"{n} {k}" for k, n in sorted(seen.items())) or "none"
        if seen:
            errors += f" (at most {row['max_error_rate'] * 100:.0f} % in a second)"
        rows.append(
            f"| {row['scenario']} | {fault or 'none'} | {recovery} | {errors} "
            f"| {row['duplicate_deliveries']} | {row['workflows']} "
            f"| {row['lost_acknowledged_writes']} of {row['acknowledged_writes']} "
            f"| {row['client_500s']} |"
        )
    a = result["audit"]
    server = sum(v for k, v in result["server_errors"].items() if k.startswith("status"))
    load = " ".join(result.get("load_average", []))
    tail = (
        f"\nRun of {result['seconds']} s, seed {result['seed']}, load average at the end {load} "
        f"(2 cores): {'every check passed' if result['ok'] else 'CHECKS FAILED'}. "
        f"{a['acquires']} task acquisitions, {a['holder_violations']} times two holders; "
        f"{a['settled_promise_changes']} changes to settled promises; outbox left "
        f"{a['outbox_left']} rows; server 5xx other than 503: {server}; SDK workers saw "
        f"{result['sdk_500s']} 500s; processes not running at the end: "
        f"{', '.join(result['processes_not_running']) or 'none'}.\n"
    )
    return head + "\n".join(rows) + "\n" + tail


def write_report(result: dict[str, Any], name: str) -> None:
    write_between(name, table(result))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos.hosts_run", description=__doc__)
    parser.add_argument("--short", action="store_true")
    parser.add_argument("--pg-only", action="store_true", help="no Redis, no Celery")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--json", default="", help="write the result here")
    parser.add_argument("--no-report", action="store_true")
    args = parser.parse_args(argv)
    # A SIGTERM (a test's timeout) unwinds through the finally blocks: the hosts are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    scenarios = SHORT if args.short else PG_ONLY if args.pg_only else FULL
    seed = args.seed if args.seed is not None else random.randrange(1 << 16)
    try:
        outcome, result = execute(scenarios, seed, args.pg_only, args.keep)
    except Missing as exc:
        log(f"cannot run: {exc}")
        return 2
    log("\n" + table(result))
    for problem in result["problems"]:
        log(f"PROBLEM {problem}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    if not args.short and not args.no_report:
        write_report(result, "hosts-pg" if args.pg_only else "hosts")
        log(f"wrote {REPORT.relative_to(ROOT)}")
    return 0 if outcome.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
