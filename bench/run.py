"""``make bench``: the server's throughput and latency against PostgreSQL, in one go on one machine,
each protocol figure next to the database's own ceiling measured in the same run.

1. Ceiling: pgbench, one state transition per transaction (UPDATE one promise row, INSERT one
   outbox row) on the real migrated tables, each client on its own row; the best of 1..16
   clients, then the median of three more runs at that client count (the ratios' denominator).
2. Protocol throughput over HTTP (``serve --no-embedded``: the pure web tier, no broker) from wrk
   with one keep-alive connection per thread: (a) promise.create + promise.settle pairs, (b) the
   SDK-shaped task cycle (task.create, 2 x (fenced create + fenced settle), task.fulfill). Then the
   best configuration three times on fresh servers, each at full rate and at half the best rate
   from a fixed-rate generator (bench/loadgen.py): median, min and max of each figure, and the
   server process tree's CPU seconds per 1,000 requests. After each of the three pair runs, the
   floor (bench/floor.py): a bare ASGI app on the same stack answering the same two requests with
   the same two statements and nothing else, in the same configuration: what any Python server
   on this stack spends at least, on this machine, today.
2c. ``make run``'s shape (``embedded``): ``manage.py serve`` with its embedded default (the steps
   and push in the process) on a fresh SQLite file, promise.create + promise.settle pairs from
   wrk, the best of a small connection grid then three runs on fresh servers and files: the
   median next to the PostgreSQL ceiling of the same run, and the CPU seconds per 1,000 requests.
3. Timeout sweep scaling: 100,000 external promises past their deadline processed by
   ``engine.steps.promise_timeouts``, with 1,000,000 settled promises present versus none.
4. Outbox drain rate: 20,000 due messages to one connected SSE stream, and to a local HTTP
   receiver through ``outbox.push.drain_push``.
5. Dispatch latency (bench/dispatch_latency.py): promise.create response to ``execute`` frame.
5b. Timer lateness (bench/timers.py): timer promises due over ~5 s, each observed through a
   listener's ``unblock`` frame; lateness after the deadline, embedded and under Celery.
6. Cost of metrics: pair throughput of a server with ``RESONATE_METRICS`` on over one with it
   off, each started afresh per run in ABBA order (on, off, off, on, ...); the ratio of medians.
7. Django tasks (``djtasks``, about two minutes): trivial tasks (``tests.tasksapp_fixtures.noop``)
   enqueued through Django's API, then drained by one ``manage.py resonate worker`` process
   (concurrency 1 and 4 in turn, three runs each: medians with min and max): tasks/s, the
   worker's CPU seconds per 1,000 tasks, the enqueue rate, and the ratio to
   promise.create + promise.settle pairs through the typed services on one connection (the
   same path without the worker), measured in the same run.
7b. Peers (``peers``, about twenty minutes; bench/peers/): (a) the same trivial tasks through
   our backend and worker, Procrastinate's Django integration, django-tasks-db's ``db_worker``
   and Celery with Redis, each on a fresh database of the same PostgreSQL, one worker process at
   concurrency 1 and 4, the backends in turn within each repeat: tasks/s, enqueue/s, CPU seconds
   per 1,000 tasks of each worker and of PostgreSQL, medians of three with min and max, and each
   peer's ratio to ours; (b) 500 durable three-step workflows, 32 in flight, through the Python SDK
   on our server (the production shape, and embedded) against DBOS Transact on the same
   PostgreSQL (its pool at its default and at 40): workflows/s, p50 and p99 per workflow, CPU
   seconds per 1,000 workflows of each process group and of PostgreSQL, medians of three, DBOS's
   ratios to ours (bench/peers/workflows.py). The peers run in virtualenvs of their own under
   ``.peers/``.
8. Growth (``growth``): a second fresh database holding 10,000,000 settled SDK-shaped promises
   with their tasks (1,000,000 with ``--quick``; built with SQL by bench/djtool.py load-trees).
   (a) create+settle and the task cycle from wrk on it and on the empty one, in ABBA order, each
   run on a fresh server: the ratio of medians, min and max, load averages, CPU per 1,000
   requests; (b) while loadgen offers create+settle at a fixed rate (half the settled database's
   rate), retention as the step runner prunes (engine.retention.tick: RETENTION_INTERVAL_MS,
   RETENTION_BUDGET_MS, RETENTION_BATCH at their defaults) and as ``manage.py resonate prune``
   does (passes back to back): rows deleted per second, and the load's p99 then over its p99
   without pruning; (c) pg_total_relation_size and
   each index's pg_relation_size of the hot tables before the prune, after it, after a plain
   VACUUM, and after as many promises as were pruned were inserted again: space is reused when
   the tables do not grow (the VACUUM's own report says whether it vacuumed the indexes, which
   the reuse needs: below 2 % of pages with dead rows PostgreSQL skips it).

It creates a fresh database ``resonate_bench_<random>`` on the server at ``--pg-url``, migrates it,
and drops it at the end. All load goes to 127.0.0.1; every loop is bounded in count and time.
Logs the 1-minute load average before every measured run; prints one table and writes
bench/results/latest.json.

    .venv/bin/python bench/run.py [--quick] [--only ceiling,http,dispatch,timers,djtasks,...]
    .venv/bin/python bench/run.py --only growth --growth-promises 200000   # a smaller growth run
    .venv/bin/python bench/run.py --markdown bench/results/latest.json   # the table as Markdown
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import platform
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dispatch_latency
import httpx
import psycopg
import timers
from peers import tasks as peer_tasks
from psycopg.conninfo import conninfo_to_dict

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
PY = str(ROOT / ".venv" / "bin" / "python")
CELERY = str(ROOT / ".venv" / "bin" / "celery")
RESULTS = BENCH / "results" / "latest.json"
HOUR = 3_600_000

SECTIONS = (
    "ceiling",
    "http",
    "embedded",
    "dispatch",
    "timers",
    "drain",
    "sweep",
    "metrics",
    "djtasks",
    "peers",
    "growth",
)
REPEATS = 3  # each protocol figure is the median of this many runs, min and max beside it
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def load_average() -> float:
    return os.getloadavg()[0]


def log_load(what: str) -> float:
    load = load_average()
    log(f"load average {load:.2f} before {what}")
    return load


def spread(values: list[float]) -> dict[str, Any]:
    """The median of repeated runs with their min and max."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"median": median, "min": ordered[0], "max": ordered[-1], "runs": values}


def proc_stats() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command name, the fields after it) of every live process, from /proc/<pid>/stat:
    fields[1] is the ppid; 11..14 are utime, stime, cutime, cstime (stat(5) 14..17)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        close = raw.rindex(")")
        yield int(entry), raw[raw.index("(") + 1 : close], raw[close + 2 :].split()


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and every live descendant, plus what the exited
    descendants left in their parents' ``cutime``/``cstime``."""
    stats = {pid: (int(f[1]), sum(int(x) for x in f[11:15])) for pid, _, f in proc_stats()}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
            todo.extend(children.get(pid, []))
    return total / CLOCK_TICKS


def postgres_cpu_seconds() -> float:
    """User + system CPU seconds of every live PostgreSQL process on this machine (the server
    the bench database lives on is local: its backends, and its background writers, which are
    part of what a request costs it). Backends that exit between two readings drop out, so the
    figure is taken around a load whose connections stay open (wrk's)."""
    ticks = sum(int(f[11]) + int(f[12]) for _, name, f in proc_stats() if name == "postgres")
    return ticks / CLOCK_TICKS


def database_cpu_seconds(db: Database) -> float:
    """As :func:`postgres_cpu_seconds`, counting of the backends only those connected to ``db``
    (with the server's own processes: WAL writer, checkpointer, background writer): on a
    machine where other databases serve other work, their backends neither add to the figure
    nor, exiting, take from it."""
    with db.connect() as conn:
        others = {
            pid
            for (pid,) in conn.execute(
                "SELECT pid FROM pg_stat_activity"
                " WHERE datname IS NOT NULL AND datname <> current_database()"
            )
        }
    ticks = sum(
        int(f[11]) + int(f[12])
        for pid, name, f in proc_stats()
        if name == "postgres" and pid not in others
    )
    return ticks / CLOCK_TICKS


# --- the database --------------------------------------------------------------------------------


@dataclass
class Database:
    server_url: str  # postgresql://user@host:port (no database)
    name: str

    @property
    def url(self) -> str:
        return f"{self.server_url.rstrip('/')}/{self.name}"

    def connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url, autocommit=True, connect_timeout=10)

    def sql(self, *statements: str) -> None:
        with self.connect() as conn:
            for statement in statements:
                conn.execute(statement.encode())

    def scalar(self, query: str) -> Any:
        with self.connect() as conn:
            row = conn.execute(query.encode()).fetchone()
            return None if row is None else row[0]

    def reset(self) -> None:
        """Empty every table the benchmarks write (promises cascade to tasks, callbacks...)."""
        self.sql(
            "TRUNCATE promises_promise, outbox_message, outbox_subscriber CASCADE",
            "VACUUM ANALYZE",
            "CHECKPOINT",
        )


@contextlib.contextmanager
def bench_database(server_url: str, keep: bool) -> Iterator[Database]:
    db = Database(server_url, f"resonate_bench_{secrets.token_hex(4)}")
    admin = f"{server_url.rstrip('/')}/postgres"
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE DATABASE "{db.name}"'.encode())
    try:
        log(f"database {db.name}: migrating")
        subprocess.run(
            [PY, "manage.py", "migrate", "-v0", "--noinput"],
            cwd=ROOT,
            env=env_for(db),
            check=True,
            timeout=300,
        )
        yield db
    finally:
        if keep:
            log(f"kept database {db.name}")
        else:
            with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)'.encode())
            log(f"dropped database {db.name}")


def env_for(db: Database, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": db.url,
        "CELERY_BROKER_URL": "",
        "RESONATE_NOTIFY_URL": "",
        "UVICORN_LOG_LEVEL": "warning",
        "PYTHONDONTWRITEBYTECODE": "1",
        "RESONATE_PUSH_ALLOWED": "127.0.0.1",  # the push receiver listens on loopback
    }
    env.pop("RESONATE_DEBUG", None)
    env.update(extra)
    return env


def djtool(db: Database, *args: str, timeout: float = 600) -> dict[str, Any]:
    out = subprocess.run(
        [PY, str(BENCH / "djtool.py"), *args],
        cwd=ROOT,
        env=env_for(db),
        check=True,
        timeout=timeout,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --- the server ----------------------------------------------------------------------------------


def serve_has_workers() -> bool:
    out = subprocess.run(
        [PY, "manage.py", "serve", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "DATABASE_URL": "sqlite:///:memory:"},
    )
    return "--workers" in out.stdout


class Server:
    """``manage.py serve --no-embedded`` (or ``--embedded``) on a free port of 127.0.0.1, against
    the bench database."""

    def __init__(
        self,
        db: Database,
        workers: int | None = None,
        env: dict[str, str] | None = None,
        embedded: bool = False,
        floor: bool = False,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        mode = "--embedded" if embedded else "--no-embedded"
        cmd = [PY, "manage.py", "serve", mode, "--host", "127.0.0.1"]
        if floor:  # bench/floor.py: the same stack without the server (see there)
            cmd = [PY, "-m", "uvicorn", "bench.floor:app", "--host", "127.0.0.1"]
            cmd += ["--log-level", "warning"]
            env = {**(env or {}), "FLOOR_DATABASE_URL": db.url}
        cmd += ["--port", str(self.port)]
        if workers is not None:
            cmd += ["--workers", str(workers)]
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env_for(db, **(env or {})), stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        self.log.seek(0)
        raise SystemExit(f"server did not become ready:\n{self.log.read().decode()[-3000:]}")

    def cpu_seconds(self) -> float:
        """CPU seconds the server's process tree (its web workers included) has used so far."""
        return tree_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- 1. the ceiling ------------------------------------------------------------------------------

CEILING_SCRIPT = """\
\\set cid :client_id + 1
BEGIN;
UPDATE promises_promise SET state = 'resolved', value_data = 'e30=', settled_at = 1
  WHERE id = 'ceil-' || :cid;
INSERT INTO outbox_message (key, kind, address, task_id, version, promise, created_at, revision,
                            attempts, next_attempt_at, last_error)
  VALUES (gen_random_uuid()::text, 'unblock', 'poll://any@bench', NULL, NULL,
          '{"id":"ceil"}'::jsonb, 1, 1, 0, 9000000000000000, '');
COMMIT;
"""


def ceiling(db: Database, seconds: int, clients: list[int]) -> dict[str, Any]:
    djtool(
        db, "load-promises", "--prefix", "ceil", "--count", str(max(clients)), "--state", "pending"
    )
    db.sql("VACUUM ANALYZE", "CHECKPOINT")
    script = Path(tempfile.mkdtemp()) / "transition.sql"
    script.write_text(CEILING_SCRIPT)
    conninfo = conninfo_to_dict(db.url)
    runs: dict[int, dict[str, float]] = {}

    def pgbench(c: int, label: str) -> dict[str, float]:
        log_load(f"ceiling, {c} clients{label}")
        cmd = ["pgbench", "-n", "-M", "prepared", "-c", str(c), "-j", str(min(c, 2))]
        cmd += ["-T", str(seconds), "-f", str(script)]
        cmd += ["-h", str(conninfo.get("host", "127.0.0.1")), "-p", str(conninfo.get("port", 5432))]
        cmd += ["-U", str(conninfo.get("user", "postgres")), db.name]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
        match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out.stdout)
        if out.returncode != 0 or not match:
            raise SystemExit(f"pgbench failed:\n{out.stdout}\n{out.stderr}")
        lat = re.search(r"latency average = ([\d.]+) ms", out.stdout)
        run = {"tps": float(match.group(1)), "latency_ms": float(lat.group(1)) if lat else 0.0}
        log(f"ceiling: {c:2d} clients{label} {run['tps']:8.0f} transitions/s")
        return run

    for c in clients:
        runs[c] = pgbench(c, "")
    best = max(runs, key=lambda c: runs[c]["tps"])
    # The grid's best is the highest of five noisy runs; the ceiling every ratio is taken against
    # is the median of REPEATS fresh runs at that client count, like every other figure.
    repeated = [pgbench(best, f", run {i + 1}/{REPEATS}")["tps"] for i in range(REPEATS)]
    shutil.rmtree(script.parent, ignore_errors=True)
    db.reset()
    tps = spread(repeated)
    return {
        "by_clients": runs,
        "best_clients": best,
        "grid_best_tps": runs[best]["tps"],
        "repeated": tps,
        "tps": tps["median"],
    }


# --- 2. protocol throughput ---------------------------------------------------------------------

LUA = {"pair": BENCH / "lua" / "promise_pair.lua", "cycle": BENCH / "lua" / "task_cycle.lua"}


def wrk(url: str, workload: str, conns: int, seconds: int) -> dict[str, Any]:
    run_id = f"{workload}{secrets.token_hex(3)}c{conns}"
    cmd = ["wrk", "-t", str(conns), "-c", str(conns), "-d", f"{seconds}s", "--timeout", "10s"]
    cmd += ["-s", str(LUA[workload]), url + "/", "--", run_id, str(now_ms() + HOUR)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    line = next((x for x in out.stdout.splitlines() if x.startswith("BENCHJSON ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"wrk failed:\n{out.stdout}\n{out.stderr}")
    r: dict[str, Any] = json.loads(line[len("BENCHJSON ") :])
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    r["p50_ms"], r["p99_ms"] = r["p50_us"] / 1000, r["p99_us"] / 1000
    r["conns"] = conns
    return r


def loadgen(url: str, workload: str, rate: float, conns: int, seconds: int) -> dict[str, Any]:
    cmd = [PY, str(BENCH / "loadgen.py"), "--url", url, "--workload", workload]
    cmd += ["--rate", f"{rate:.1f}", "--conns", str(conns), "--seconds", str(seconds)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 3 + 60)
    if out.returncode != 0:
        raise SystemExit(f"loadgen failed:\n{out.stdout}\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def per_thousand(cpu: float, requests: int) -> float:
    return 1000 * cpu / requests if requests else float("nan")


# Envelope threads per web process tried by the grid: the default on PostgreSQL (2) suits
# one-statement requests (create+settle); the task cycle, which waits on the database longer per
# request, has done better with 3 (docs/reference/settings.md#web_threads).
WEB_THREADS = (2, 3)


def grid_run(
    server: Server,
    runs: list[dict[str, Any]],
    workload: str,
    workers: int | None,
    threads: int,
    conns: int,
    seconds: int,
) -> None:
    log_load(f"{workload} workers={workers} threads={threads} conns={conns}")
    cpu = server.cpu_seconds()
    r = wrk(server.url, workload, conns, seconds)
    r["cpu_per_1k"] = per_thousand(server.cpu_seconds() - cpu, r["requests"])
    r["workers"] = workers
    r["threads"] = threads
    runs.append(r)
    log(
        f"{workload:5s} workers={workers} threads={threads} conns={conns:2d}: "
        f"{r['rps']:7.0f} req/s p50 {r['p50_ms']:6.1f} ms p99 {r['p99_ms']:6.1f} ms "
        f"cpu {r['cpu_per_1k']:.2f} s/1k req "
        f"non200 {r['non200']} socket errors {r['socket_errors']}"
    )


def http(
    db: Database, seconds: int, conns: list[int], half_seconds: int, repeats: int
) -> dict[str, Any]:
    """The grid (web processes x envelope threads per process x connections, one run each)
    finds each workload's best configuration; that configuration is then run ``repeats`` times,
    each on a freshly started server, at full rate (wrk) and at half the grid's best rate
    (loadgen), with the server's CPU seconds read before and after each load phase."""
    options: list[int | None] = [1, 2] if serve_has_workers() else [None]
    runs: dict[str, list[dict[str, Any]]] = {"pair": [], "cycle": []}
    for workers in options:
        for threads in WEB_THREADS:
            env = {"RESONATE_WEB_THREADS": str(threads)}
            with Server(db, workers, env=env) as server:
                wrk(server.url, "pair", 4, 2)  # warm up: connections, caches, Python's paths
                for workload in ("pair", "cycle"):
                    for n in conns:
                        grid_run(server, runs[workload], workload, workers, threads, n, seconds)
    out: dict[str, Any] = {"workers_option": serve_has_workers(), "runs": runs}
    for workload in ("pair", "cycle"):
        best = max(runs[workload], key=lambda r: r["rps"])
        rate = best["rps"] / 2
        full: list[dict[str, Any]] = []
        half: list[dict[str, Any]] = []
        floor: list[dict[str, Any]] = []
        for i in range(repeats):
            env = {"RESONATE_WEB_THREADS": str(best["threads"])}
            with Server(db, best["workers"], env=env) as server:
                wrk(server.url, "pair", 4, 2)  # warm up
                label = f"{workload} run {i + 1}/{repeats}"
                config = f"workers={best['workers']}, threads={best['threads']}"
                load = log_load(f"{label} ({config}, conns={best['conns']})")
                cpu, pg = server.cpu_seconds(), postgres_cpu_seconds()
                r = wrk(server.url, workload, best["conns"], seconds)
                r["cpu_per_1k"] = per_thousand(server.cpu_seconds() - cpu, r["requests"])
                r["pg_cpu_per_1k"] = per_thousand(postgres_cpu_seconds() - pg, r["requests"])
                r["load_average"] = load
                full.append(r)
                load = log_load(f"{label} at half rate ({rate:.0f} req/s)")
                cpu = server.cpu_seconds()
                h = loadgen(server.url, workload, rate, best["conns"], half_seconds)
                h["cpu_per_1k"] = per_thousand(server.cpu_seconds() - cpu, h["requests"])
                h["load_average"] = load
                half.append(h)
            if workload == "pair":
                floor.append(floor_run(db, best["workers"], best["conns"], seconds, i, repeats))
            log(
                f"{label}: {r['rps']:7.0f} req/s p99 {r['p99_ms']:.1f} ms "
                f"cpu {r['cpu_per_1k']:.2f} s/1k req, PostgreSQL {r['pg_cpu_per_1k']:.2f}; "
                f"half rate p50 {h['p50_ms']:.1f} ms "
                f"p99 {h['p99_ms']:.1f} ms cpu {h['cpu_per_1k']:.2f} s/1k req"
            )
        out[workload] = {
            "best": best,
            "rps": spread([r["rps"] for r in full]),
            "p50_ms": spread([r["p50_ms"] for r in full]),
            "p99_ms": spread([r["p99_ms"] for r in full]),
            "non200": sum(r["non200"] for r in full),
            "cpu_per_1k": spread([r["cpu_per_1k"] for r in full]),
            "pg_cpu_per_1k": spread([r["pg_cpu_per_1k"] for r in full]),
            "half_rate": {
                "offered_rate": rate,
                "p50_ms": spread([h["p50_ms"] for h in half]),
                "p99_ms": spread([h["p99_ms"] for h in half]),
                "service_p99_ms": spread([h["service_p99_ms"] for h in half]),
                "cpu_per_1k": spread([h["cpu_per_1k"] for h in half]),
            },
            "full_runs": full,
            "half_runs": half,
        }
        if floor:
            out[workload]["floor"] = {
                "rps": spread([f["rps"] for f in floor]),
                "cpu_per_1k": spread([f["cpu_per_1k"] for f in floor]),
                "pg_cpu_per_1k": spread([f["pg_cpu_per_1k"] for f in floor]),
                "runs": floor,
            }
    db.reset()
    return out


def floor_run(
    db: Database, workers: int | None, conns: int, seconds: int, i: int, repeats: int
) -> dict[str, Any]:
    """One run of bench/floor.py (the same stack, the same two statements, no server), with the
    real server's best configuration, right after the real server's run ``i``."""
    with Server(db, workers or 1, floor=True) as server:
        wrk(server.url, "pair", 4, 2)  # warm up
        load = log_load(f"floor run {i + 1}/{repeats} (workers={workers or 1}, conns={conns})")
        cpu, pg = server.cpu_seconds(), postgres_cpu_seconds()
        r = wrk(server.url, "pair", conns, seconds)
        r["cpu_per_1k"] = per_thousand(server.cpu_seconds() - cpu, r["requests"])
        r["pg_cpu_per_1k"] = per_thousand(postgres_cpu_seconds() - pg, r["requests"])
        r["load_average"] = load
    log(
        f"floor run {i + 1}/{repeats}: {r['rps']:7.0f} req/s p99 {r['p99_ms']:.1f} ms "
        f"cpu {r['cpu_per_1k']:.2f} s/1k req, PostgreSQL {r['pg_cpu_per_1k']:.2f} "
        f"non200 {r['non200']}"
    )
    return r


def embedded(db: Database, seconds: int, conns: list[int], repeats: int) -> dict[str, Any]:
    """``make run``: the embedded server on a fresh SQLite file per run
    (docs/tutorial.md#1-start-the-server)."""

    def one(n: int, label: str) -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="resonate-embedded-") as tmp:
            env = {"DATABASE_URL": f"sqlite:///{tmp}/resonate.sqlite3"}
            subprocess.run(
                [PY, "manage.py", "migrate", "--noinput", "-v", "0"],
                cwd=ROOT,
                env=env_for(db, **env),
                check=True,
                timeout=300,
            )
            with Server(db, None, env, embedded=True) as server:
                wrk(server.url, "pair", 4, 2)  # warm up
                load = log_load(f"embedded {label} conns={n}")
                cpu = server.cpu_seconds()
                r = wrk(server.url, "pair", n, seconds)
                r["cpu_per_1k"] = per_thousand(server.cpu_seconds() - cpu, r["requests"])
                r["load_average"] = load
        log(
            f"embedded {label} conns={n:2d}: {r['rps']:7.0f} req/s p99 {r['p99_ms']:.1f} ms "
            f"cpu {r['cpu_per_1k']:.2f} s/1k req non200 {r['non200']}"
        )
        return r

    grid = [one(n, "grid") for n in conns]
    best = max(grid, key=lambda r: r["rps"])["conns"]
    full = [one(best, f"run {i + 1}/{repeats}") for i in range(repeats)]
    return {
        "conns": best,
        "grid": grid,
        "rps": spread([r["rps"] for r in full]),
        "p99_ms": spread([r["p99_ms"] for r in full]),
        "cpu_per_1k": spread([r["cpu_per_1k"] for r in full]),
        "non200": sum(r["non200"] for r in full),
        "runs": full,
    }


def metrics_cost(db: Database, seconds: int, rounds: int, conns: int = 8) -> dict[str, Any]:
    """Pair throughput with metrics on over off: one server at a time, started afresh for each
    run in ABBA order (on, off, off, on, ...), so neither a drift in the machine's load nor what
    a process accumulates favours one side. (Two servers side by side differed by ~15 % with the
    same settings: the slot, not the setting, decided.)"""
    rps: dict[str, list[float]] = {"on": [], "off": []}
    for i in range(rounds):
        for key in ("on", "off") if i % 2 == 0 else ("off", "on"):
            env = {"RESONATE_METRICS": "true" if key == "on" else "false"}
            with Server(db, 1, env) as server:
                wrk(server.url, "pair", 4, 2)  # warm up
                log_load(f"metrics {key}")
                r = wrk(server.url, "pair", conns, seconds)
            rps[key].append(r["rps"])
            log(f"metrics {key:3s}: {r['rps']:7.0f} req/s (non200 {r['non200']})")
    medians = {k: sorted(v)[len(v) // 2] for k, v in rps.items()}
    db.reset()
    ratio = medians["on"] / medians["off"]
    return {"rps": rps, "on": medians["on"], "off": medians["off"], "ratio": ratio}


# --- 3. timeout sweep ---------------------------------------------------------------------------


def sweep(db: Database, count: int, settled: int, max_seconds: int) -> dict[str, Any]:
    def timed(prefix: str) -> dict[str, Any]:
        djtool(db, "load-promises", "--prefix", prefix, "--count", str(count), "--state", "pending")
        db.sql("VACUUM ANALYZE promises_promise", "CHECKPOINT")
        log_load(f"sweep {prefix}")
        r = djtool(db, "sweep", "--max-seconds", str(max_seconds), timeout=max_seconds + 120)
        left = db.scalar(
            "SELECT count(*) FROM promises_promise WHERE state = 'pending' AND external"
        )
        r["left_pending"] = left
        seconds = r["seconds"] if r["seconds"] is not None else float(max_seconds)
        r["ms_per_promise"] = 1000 * seconds / max(r["processed"], 1)
        r["promises_per_s"] = r["processed"] / seconds if seconds else 0.0
        return r

    db.reset()
    log(f"sweep: {count} due promises, no settled promises")
    alone = timed("due0")
    log(f"sweep: {alone['processed']} in {alone['seconds']} s ({alone['promises_per_s']:.0f}/s)")
    db.reset()
    t0 = time.perf_counter()
    djtool(db, "load-promises", "--prefix", "old", "--count", str(settled), "--state", "settled")
    log(f"sweep: loaded {settled} settled promises in {time.perf_counter() - t0:.1f} s")
    log(f"sweep: {count} due promises, {settled} settled promises present")
    crowded = timed("due1")
    log(f"sweep: {crowded['processed']} in {crowded['seconds']} s")
    ratio = crowded["ms_per_promise"] / alone["ms_per_promise"]
    db.reset()
    return {"count": count, "settled": settled, "none": alone, "with": crowded, "ratio": ratio}


# --- 4. outbox drain ----------------------------------------------------------------------------


def sse_drain(db: Database, n: int, max_seconds: int) -> dict[str, Any]:
    """Connect one SSE stream and time until ``n`` data frames have arrived."""
    sid = f"drain{secrets.token_hex(3)}"
    djtool(db, "load-outbox", "--address", f"poll://uni@bench/{sid}", "--count", str(n))
    db.sql("VACUUM ANALYZE outbox_message")
    with Server(db) as server:
        log_load("the SSE drain")
        frames, tail = 0, b""
        t0 = time.perf_counter()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            request = f"GET /poll/bench/{sid} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            sock.sendall(f"{request}Accept: text/event-stream\r\n\r\n".encode())
            deadline = t0 + max_seconds
            while frames < n and time.perf_counter() < deadline:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                # Every data frame is one JSON object: it ends with "}\n\n" (comments do not).
                frames += (tail + chunk).count(b"}\n\n")
                tail = chunk[-2:]
            elapsed = time.perf_counter() - t0
            empty_at = None
            deadline = time.perf_counter() + 30
            while time.perf_counter() < deadline:
                if db.scalar("SELECT count(*) FROM outbox_message") == 0:
                    empty_at = time.perf_counter() - t0
                    break
                time.sleep(0.05)
    db.reset()
    return {
        "n": n,
        "frames": frames,
        "seconds": elapsed,
        "per_s": frames / elapsed,
        "table_empty_after_s": empty_at,
    }


def push_drain(db: Database, n: int, max_seconds: int) -> dict[str, Any]:
    port = free_port()
    receiver = subprocess.Popen(
        [PY, str(BENCH / "receiver.py"), str(port)], cwd=ROOT, stderr=subprocess.DEVNULL
    )
    try:
        url = f"http://127.0.0.1:{port}/"
        for _ in range(100):
            try:
                httpx.get(url + "count", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        djtool(db, "load-outbox", "--address", url, "--count", str(n))
        db.sql("VACUUM ANALYZE outbox_message")
        log_load("the push drain")
        r = djtool(db, "push", "--max-seconds", str(max_seconds), timeout=max_seconds + 120)
        received = int(httpx.get(url + "count", timeout=5).text)
    finally:
        receiver.terminate()
        receiver.wait(10)
    db.reset()
    return {**r, "n": n, "received": received, "per_s": r["delivered"] / r["seconds"]}


# --- 5. dispatch latency -------------------------------------------------------------------------


def dispatch(db: Database, n: int) -> dict[str, Any]:
    with Server(db) as server:
        log_load("dispatch latency")
        result = dispatch_latency.run(server.url, n)
    db.reset()
    return dict(result)


# --- 5b. timer lateness --------------------------------------------------------------------------


class CeleryRunner:
    """A Celery worker and beat on the bench database: the production shape's step runner."""

    def __init__(self, db: Database, broker: str) -> None:
        self.env = env_for(db, CELERY_BROKER_URL=broker)
        self.dir = Path(tempfile.mkdtemp(prefix="resonate-bench-celery-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        name = f"bench-{secrets.token_hex(3)}@%h"
        worker_log = self.dir / "worker.log"
        self._spawn(["worker", "-l", "info", "-n", name], worker_log)
        deadline = time.monotonic() + 60
        while " ready." not in worker_log.read_text(errors="replace"):
            if time.monotonic() > deadline or self.procs[0].poll() is not None:
                self.stop()
                raise SystemExit(f"the Celery worker did not start:\n{self.tail(worker_log)}")
            time.sleep(0.2)
        beat = ["beat", "-l", "info", "--schedule", str(self.dir / "schedule")]
        self._spawn([*beat, "--pidfile", str(self.dir / "beat.pid")], self.dir / "beat.log")

    def _spawn(self, argv: list[str], logfile: Path) -> None:
        with logfile.open("wb") as out:
            self.procs.append(
                subprocess.Popen(
                    [CELERY, "-A", "resonate_project", *argv],
                    cwd=ROOT,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own group: the worker's pool goes with it
                )
            )

    @staticmethod
    def tail(logfile: Path) -> str:
        return "\n".join(logfile.read_text(errors="replace").splitlines()[-30:])

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 15)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, 9)
                    proc.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


def broker_reachable(url: str) -> str:
    """ "" if Redis answers at ``url``, else why not."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except Exception as exc:
        return str(exc)
    return ""


def summarise_timers(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "n": sum(r["n"] for r in runs),
        "received": sum(r["received"] for r in runs),
        "per_run": runs[0]["n"],
        **{key: spread([r[key] for r in runs]) for key in ("p50_ms", "p99_ms", "max_ms")},
        "runs": runs,
    }


def timer_lateness(
    db: Database, n: int, spread_ms: int, broker: str, repeats: int
) -> dict[str, Any]:
    """Each shape ``repeats`` times, each run on a freshly started web server."""
    out: dict[str, Any] = {}
    runs = []
    for i in range(repeats):
        log_load(f"timers, embedded, run {i + 1}/{repeats}")
        with Server(db, embedded=True) as server:
            runs.append(timers.run(server.url, n, spread_ms))
        log(f"timers, embedded, run {i + 1}/{repeats}: {timers.describe(runs[-1])}")
        db.reset()
    out["embedded"] = summarise_timers(runs)
    why_not = broker_reachable(broker)
    if why_not:
        log(f"timers, Celery: skipped, no Redis at {broker} ({why_not})")
        out["celery_skipped"] = why_not
        return out
    runs = []
    celery = CeleryRunner(db, broker)
    try:
        for i in range(repeats):
            with Server(db, env={"CELERY_BROKER_URL": broker}) as server:
                log_load(f"timers, Celery, run {i + 1}/{repeats}")
                runs.append(timers.run(server.url, n, spread_ms))
            log(f"timers, Celery, run {i + 1}/{repeats}: {timers.describe(runs[-1])}")
            db.reset()
    finally:
        celery.stop()
    out["celery"] = summarise_timers(runs)
    return out


# --- report --------------------------------------------------------------------------------------


# --- 7. Django tasks through one worker -----------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drain_tasks(db: Database, count: int, concurrency: int, max_seconds: int) -> dict[str, Any]:
    db.reset()
    enqueued = djtool(db, "enqueue", "--count", str(count))
    db.sql("ANALYZE")  # the planner's view of a queue this size (autovacuum would, within a minute)
    options = json.dumps({"POLL_INTERVAL_MS": 20})
    cmd = [PY, "manage.py", "resonate", "worker", "--concurrency", str(concurrency)]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env_for(db, DJANGO_TASKS_OPTIONS=options),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # "worker ... on default: ...": it claims from here on
        cpu, started = cpu_seconds(proc.pid), time.perf_counter()
        done, deadline = 0, started + max_seconds
        while done < count and time.perf_counter() < deadline:
            time.sleep(0.05)
            done = db.scalar("SELECT count(*) FROM promises_promise WHERE state = 'resolved'")
        seconds = time.perf_counter() - started
        cpu = cpu_seconds(proc.pid) - cpu
    finally:
        proc.terminate()
        proc.wait(30)
    return {
        "concurrency": concurrency,
        "tasks": done,
        "seconds": seconds,
        "per_s": done / seconds,
        "worker_cpu_s_per_1000": cpu / max(done, 1) * 1000,
        "enqueue_per_s": enqueued["per_s"],
    }


def djtasks(db: Database, count: int, max_seconds: int, repeats: int) -> dict[str, Any]:
    db.reset()
    pairs = djtool(db, "pairs", "--count", str(count))
    log(f"djtasks: service pairs {pairs['per_s']:.0f}/s")
    out: dict[str, Any] = {"pairs": pairs}
    runs: dict[int, list[dict[str, Any]]] = {1: [], 4: []}
    for i in range(repeats):
        for concurrency in runs:  # 1, 4, 1, 4, ...: drift is shared
            log_load(f"djtasks: concurrency {concurrency}, run {i + 1}/{repeats}")
            run = drain_tasks(db, count, concurrency, max_seconds)
            runs[concurrency].append(run)
            log(
                f"djtasks: concurrency {concurrency}: {run['per_s']:.0f} tasks/s, "
                f"{run['worker_cpu_s_per_1000']:.2f} CPU s / 1000, "
                f"enqueue {run['enqueue_per_s']:.0f}/s"
            )
    for concurrency, done in runs.items():
        per_s = spread([r["per_s"] for r in done])
        out[f"c{concurrency}"] = {
            "concurrency": concurrency,
            "per_s": per_s,
            "worker_cpu_s_per_1000": spread([r["worker_cpu_s_per_1000"] for r in done]),
            "enqueue_per_s": spread([r["enqueue_per_s"] for r in done]),
            "ratio_to_pairs": per_s["median"] / pairs["per_s"],
            "runs": done,
        }
    return out


def peer_workflows(pg_url: str, quick: bool) -> dict[str, Any]:
    """bench/peers/workflows.py in a process of its own (it imports this module by name): durable
    three-step workflows through the Python SDK on our server against DBOS Transact."""
    out = BENCH / "results" / "peers-workflows.json"
    cmd = [PY, "-m", "bench.peers.workflows", "--pg-url", pg_url, "--json", str(out)]
    done = subprocess.run(
        [*cmd, *(["--quick"] if quick else [])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1_800,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench/peers/workflows.py failed:\n{done.stdout[-3000:]}{done.stderr}")
    res: dict[str, Any] = json.loads(out.read_text())
    lines = done.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("----")), len(lines))
    res["wide"] = "\n".join(line for line in lines[start:] if not line.startswith("wrote "))
    return res


# --- 8. growth -----------------------------------------------------------------------------------

DAY = 24 * HOUR
# The tables every request or step writes; their sizes are reported, and the reuse check is on
# the first two (the rows the prune deletes and the load inserts again).
HOT_TABLES = (
    "promises_promise",
    "tasks_app_task",
    "outbox_message",
    "promises_callback",
    "promises_listener",
)
GROWTH_CONNS = 8
GROWTH_THREADS = 2  # the PostgreSQL default of WEB_THREADS
REUSE_TOLERANCE = 0.01  # of the heap freed: a few pages a new insert may still add


def relation_sizes(db: Database) -> dict[str, Any]:
    """Per hot table: pg_total_relation_size (heap, indexes, TOAST), the heap alone, each index,
    and the live and dead rows the statistics count."""
    out: dict[str, Any] = {}
    with db.connect() as conn:
        for table in HOT_TABLES:
            total, heap, live, dead = conn.execute(
                "SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid),"
                " s.n_live_tup, s.n_dead_tup FROM pg_class c"
                " JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.relname = %s",
                [table],
            ).fetchone() or (0, 0, 0, 0)
            indexes = dict(
                conn.execute(
                    "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid)"
                    " FROM pg_index WHERE indrelid = %s::regclass ORDER BY 1",
                    [table],
                ).fetchall()
            )
            out[table] = {
                "total": total,
                "heap": heap,
                "indexes": indexes,
                "live_rows": live,
                "dead_rows": dead,
            }
    return out


def vacuum(db: Database, tables: tuple[str, ...]) -> dict[str, Any]:
    """A plain ``VACUUM (VERBOSE, ANALYZE)`` of each table, and from its report whether it
    vacuumed the indexes: PostgreSQL (14 and later) skips index vacuuming, and with it the pass
    that makes the dead rows' space reusable, when fewer than 2 % of the table's pages hold dead
    rows ("index scan bypassed"), unless the table's ``vacuum_index_cleanup`` is on."""
    out: dict[str, Any] = {}
    with db.connect() as conn:
        for table in tables:
            notices: list[str] = []

            def keep(d: psycopg.errors.Diagnostic, into: list[str] = notices) -> None:
                into.append(d.message_primary or "")

            conn.add_notice_handler(keep)
            t0 = time.perf_counter()
            conn.execute(f"VACUUM (VERBOSE, ANALYZE) {table}".encode())
            seconds = time.perf_counter() - t0
            conn.remove_notice_handler(keep)
            text = "\n".join(notices)
            first = next((n for n in notices if "index scan" in n), "")
            line = next((x for x in first.splitlines() if x.startswith("index scan")), "")
            out[table] = {
                "seconds": seconds,
                "index_vacuum": "bypassed" if "index scan bypassed" in text else "done",
                "report": line,
            }
    return out


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def growth_http(empty: Database, full: Database, seconds: int, repeats: int) -> dict[str, Any]:
    """Both workloads on both databases, each run on a fresh server in ABBA order (empty, full,
    full, empty, ...) so a drift of the machine's load favours neither; the empty database is
    emptied before each of its runs."""
    workers = 1 if serve_has_workers() else None
    env = {"RESONATE_WEB_THREADS": str(GROWTH_THREADS)}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        w: {"empty": [], "full": []} for w in ("pair", "cycle")
    }
    for i in range(repeats):
        for name in ("empty", "full") if i % 2 == 0 else ("full", "empty"):
            db = empty if name == "empty" else full
            if name == "empty":
                db.reset()
            else:
                db.sql("ANALYZE", "CHECKPOINT")  # as reset() does for the empty one
            with Server(db, workers, env=env) as server:
                wrk(server.url, "pair", 4, 2)  # warm up
                for workload in ("pair", "cycle"):
                    load = log_load(f"growth {workload} on the {name} database, run {i + 1}")
                    cpu, pg = server.cpu_seconds(), database_cpu_seconds(db)
                    r = wrk(server.url, workload, GROWTH_CONNS, seconds)
                    r["cpu_per_1k"] = per_thousand(server.cpu_seconds() - cpu, r["requests"])
                    used = database_cpu_seconds(db) - pg
                    r["pg_cpu_per_1k"] = per_thousand(used, r["requests"])
                    r["load_average"] = load
                    runs[workload][name].append(r)
                    log(
                        f"growth {workload:5s} {name:5s}: {r['rps']:7.0f} req/s "
                        f"p99 {r['p99_ms']:.1f} ms cpu {r['cpu_per_1k']:.2f} s/1k, "
                        f"PostgreSQL {r['pg_cpu_per_1k']:.2f}; non200 {r['non200']}"
                    )
    out: dict[str, Any] = {"workers": workers, "threads": GROWTH_THREADS, "conns": GROWTH_CONNS}
    for workload, by_db in runs.items():
        summary: dict[str, Any] = {}
        for name, rs in by_db.items():
            summary[name] = {
                key: spread([r[key] for r in rs])
                for key in ("rps", "p99_ms", "cpu_per_1k", "pg_cpu_per_1k", "load_average")
            }
            summary[name]["non200"] = sum(r["non200"] for r in rs)
            summary[name]["runs"] = rs
        summary["ratio"] = summary["full"]["rps"]["median"] / summary["empty"]["rps"]["median"]
        out[workload] = summary
    return out


PRUNE_MODES = ("runner", "cli")  # retention.tick at the settings' cadence; prune_pass back to back


def pruner(db: Database, mode: str, seconds: int) -> subprocess.Popen[str]:
    """bench/djtool.py prune, window an hour: only the built trees qualify, never the load's own
    promises. ``runner``: as the step runner prunes (RETENTION_INTERVAL_MS, RETENTION_BUDGET_MS,
    RETENTION_BATCH at their defaults); ``cli``: as ``manage.py resonate prune``, passes back to
    back."""
    cmd = [PY, str(BENCH / "djtool.py"), "prune", "--older-than-ms", str(HOUR)]
    cmd += ["--max-seconds", str(seconds + 1)] + (["--runner"] if mode == "runner" else [])
    env = env_for(db, RESONATE_RETENTION_MS=str(HOUR))
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)


def prune_under_load(db: Database, rate: float, seconds: int, repeats: int) -> dict[str, Any]:
    """Create+settle at ``rate`` from loadgen on one server: alone, then with retention beside
    it as the step runner prunes, then as ``manage.py resonate prune`` does (passes back to
    back), ``repeats`` times."""
    alone: list[dict[str, Any]] = []
    during: dict[str, list[dict[str, Any]]] = {m: [] for m in PRUNE_MODES}
    pruned: dict[str, list[dict[str, Any]]] = {m: [] for m in PRUNE_MODES}
    workers = 1 if serve_has_workers() else None
    env = {"RESONATE_WEB_THREADS": str(GROWTH_THREADS)}
    with Server(db, workers, env=env) as server:
        wrk(server.url, "pair", 4, 2)  # warm up
        for i in range(repeats):
            load = log_load(f"growth: create+settle at {rate:.0f} req/s, no pruning, run {i + 1}")
            a = loadgen(server.url, "pair", rate, GROWTH_CONNS, seconds)
            a["load_average"] = load
            alone.append(a)
            log(f"growth: p99 {a['p99_ms']:.1f} ms without pruning; non200 {a['non200']}")
            for mode in PRUNE_MODES:
                load = log_load(f"growth: create+settle at {rate:.0f} req/s, pruning ({mode})")
                proc = pruner(db, mode, seconds)
                try:
                    assert proc.stdout is not None
                    proc.stdout.readline()  # "pruning": it has started
                    d = loadgen(server.url, "pair", rate, GROWTH_CONNS, seconds)
                    printed, _ = proc.communicate(timeout=seconds + 120)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait(10)
                d["load_average"] = load
                during[mode].append(d)
                p = json.loads(printed.strip().splitlines()[-1])
                pruned[mode].append(p)
                log(
                    f"growth: p99 {d['p99_ms']:.1f} ms while pruning ({mode}) "
                    f"{p['rows_per_s']:.0f} rows/s ({p['promises']} promises, {p['tasks']} "
                    f"tasks in {p['seconds']:.1f} s); non200 {d['non200']}"
                )
    p99_alone = spread([a["p99_ms"] for a in alone])
    out: dict[str, Any] = {
        "rate": rate,
        "seconds": seconds,
        "alone": alone,
        "p99_alone_ms": p99_alone,
        "promises": sum(p["promises"] for m in PRUNE_MODES for p in pruned[m]),
        "tasks": sum(p["tasks"] for m in PRUNE_MODES for p in pruned[m]),
    }
    for mode in PRUNE_MODES:
        p99 = spread([d["p99_ms"] for d in during[mode]])
        out[mode] = {
            "during": during[mode],
            "pruned": pruned[mode],
            "batch": pruned[mode][0]["batch"],
            "interval_ms": pruned[mode][0]["interval_ms"],
            "budget_ms": pruned[mode][0]["budget_ms"],
            "p99_during_ms": p99,
            "p99_ratio": p99["median"] / p99_alone["median"],
            "rows_per_s": spread([p["rows_per_s"] for p in pruned[mode]]),
            "promises_per_s": spread([p["promises_per_s"] for p in pruned[mode]]),
            "promises": sum(p["promises"] for p in pruned[mode]),
            "tasks": sum(p["tasks"] for p in pruned[mode]),
            "non200": sum(d["non200"] for d in during[mode]),
        }
    return out


def growth(
    server_url: str, keep: bool, empty: Database, promises: int, seconds: int, repeats: int
) -> dict[str, Any]:
    out: dict[str, Any] = {"promises_built": promises}
    with bench_database(server_url, keep) as full:
        log(f"growth: building {promises:,} settled promises with their tasks")
        before = now_ms() - DAY
        built = djtool(
            full, "load-trees", "--prefix", "old", "--promises", str(promises),
            "--settled-before", str(before), "--fast", timeout=3600,
        )  # fmt: skip
        t0 = time.perf_counter()
        full.sql("VACUUM ANALYZE", "CHECKPOINT")
        built["vacuum_analyze_seconds"] = time.perf_counter() - t0
        out["build"] = built
        log(
            f"growth: built {built['promises']:,} promises and {built['tasks']:,} tasks: insert "
            f"{built['insert_seconds']:.0f} s, indexes {built['index_seconds']:.0f} s, "
            f"VACUUM ANALYZE {built['vacuum_analyze_seconds']:.0f} s"
        )
        out["http"] = growth_http(empty, full, seconds, repeats)
        out["sizes_before"] = relation_sizes(full)
        # Half what the settled database served at full rate: the load runs on that database.
        rate = out["http"]["pair"]["full"]["rps"]["median"] / 2
        out["prune"] = prune_under_load(full, rate, max(seconds * 2, 10), repeats)
        full.sql("ANALYZE")  # the statistics' dead rows (autovacuum may be off on this server)
        out["sizes_pruned"] = relation_sizes(full)
        log_load("growth: VACUUM of the hot tables")
        t0 = time.perf_counter()
        out["vacuum"] = vacuum(full, HOT_TABLES)
        out["vacuum_seconds"] = time.perf_counter() - t0
        out["sizes_vacuumed"] = relation_sizes(full)
        again = out["prune"]["promises"]
        log(f"growth: VACUUM {out['vacuum_seconds']:.1f} s; inserting {again:,} promises again")
        if again >= 3:
            out["reinsert"] = djtool(
                full, "load-trees", "--prefix", "new", "--promises", str(again),
                "--settled-before", str(now_ms() - DAY), timeout=3600,
            )  # fmt: skip
        full.sql("ANALYZE")
        out["sizes_reinserted"] = relation_sizes(full)
    out["reuse"] = reuse(out)
    return out


def reuse(g: dict[str, Any]) -> dict[str, Any]:
    """Whether inserting as many rows as the prune deleted grew the heap after the VACUUM: by
    no more than REUSE_TOLERANCE of the rows' size (and a few pages)."""
    vac, again_sizes, before = g["sizes_vacuumed"], g["sizes_reinserted"], g["sizes_before"]
    freed_rows = {"promises_promise": g["prune"]["promises"], "tasks_app_task": g["prune"]["tasks"]}
    out: dict[str, Any] = {}
    for table, rows in freed_rows.items():
        grown = again_sizes[table]["heap"] - vac[table]["heap"]
        bytes_per_row = before[table]["heap"] / max(before[table]["live_rows"], 1)
        allowance = REUSE_TOLERANCE * rows * bytes_per_row + 8192 * 4
        out[table] = {
            "heap_grown": grown,
            "index_grown": sum(again_sizes[table]["indexes"].values())
            - sum(vac[table]["indexes"].values()),
            "index_grown_by_index": {
                name: size - vac[table]["indexes"].get(name, 0)
                for name, size in again_sizes[table]["indexes"].items()
            },
            "rows_freed": rows,
            "reused": grown <= allowance,
            "index_vacuum": g["vacuum"][table]["index_vacuum"],
            "vacuum_report": g["vacuum"][table]["report"],
        }
    return out


def machine() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "git_commit": commit + ("+dirty" if dirty else ""),
        "loadavg_start": os.getloadavg()[0],
    }


def fmt(x: float | None, unit: str = "", digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}{unit}"


def ranged(r: dict[str, Any], unit: str = "", digits: int = 0) -> str:
    """``median (min..max)`` of repeated runs."""
    return (
        f"{fmt(r['median'], unit, digits)} "
        f"({fmt(r['min'], '', digits)}..{fmt(r['max'], '', digits)})"
    )


def table(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, value, target, ratio or met) rows."""
    rows: list[tuple[str, str, str, str]] = []
    ceil = res.get("ceiling", {}).get("tps")

    def vs_ceiling(x: float) -> str:
        return f"{x / ceil:.1%} of ceiling" if ceil else "-"

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    if "ceiling" in res:
        c = res["ceiling"]
        shown = ranged(c["repeated"]) if "repeated" in c else fmt(ceil)
        grid = f"grid's best single run {fmt(c['grid_best_tps'])}" if "repeated" in c else "-"
        rows.append(
            (f"1 ceiling: pgbench transitions/s ({c['best_clients']} clients)", shown, "-", grid)
        )
    if "http" in res:
        h = res["http"]
        for key, label in (("pair", "2a create+settle"), ("cycle", "2b task cycle")):
            w, best, half = h[key], h[key]["best"], h[key]["half_rate"]
            workers = f", {best['workers']} worker(s)" if best["workers"] else ""
            if best.get("threads"):
                workers += f" x {best['threads']} thread(s)"
            rps = w["rps"]["median"]
            share = 0.5 if key == "pair" else 0.2  # issue #28's targets, of the ceiling
            target = f"≥ {share:.0%} of ceiling"
            verdict = f"{met(rps / ceil >= share)}; {vs_ceiling(rps)}" if ceil else "-"
            rows.append(
                (
                    f"{label}: requests/s ({best['conns']} conns{workers})",
                    ranged(w["rps"]),
                    target,
                    verdict,
                )
            )
            if "floor" in w:
                f = w["floor"]
                rows.append(
                    (
                        "2a floor (bench/floor.py: the same stack and statements, no server)",
                        f"{ranged(f['rps'])} req/s; CPU s per 1,000: "
                        f"{ranged(f['cpu_per_1k'], '', 2)}"
                        + (
                            f", PostgreSQL {ranged(f['pg_cpu_per_1k'], '', 2)}"
                            if "pg_cpu_per_1k" in f  # (results of 2026-12-01 18:10 have none)
                            else ""
                        ),
                        "server ≥ 1.3 x floor",
                        f"{met(rps / f['rps']['median'] >= 1.3)}; server / floor "
                        f"{rps / f['rps']['median']:.2f}; floor {vs_ceiling(f['rps']['median'])}",
                    )
                )
            if key == "cycle":
                cycles = {k: v / 6 for k, v in w["rps"].items() if k != "runs"}
                rows.append(("2b task cycles/s (6 requests each)", ranged(cycles), "-", "-"))
            rows.append(
                (
                    f"{label}: p50 / p99 at max rate",
                    f"{ranged(w['p50_ms'], ' ms', 1)} / {ranged(w['p99_ms'], ' ms', 1)}",
                    "-",
                    f"non-200: {w['non200']}",
                )
            )
            rows.append(
                (
                    f"{label}: p50 / p99 at half rate ({half['offered_rate']:.0f} req/s)",
                    f"{ranged(half['p50_ms'], ' ms', 1)} / {ranged(half['p99_ms'], ' ms', 1)}",
                    "p99 ≤ 25 ms" if key == "pair" else "-",
                    (f"{met(half['p99_ms']['median'] <= 25)}; " if key == "pair" else "")
                    + f"per-request p99 {ranged(half['service_p99_ms'], ' ms', 1)}",
                )
            )
            rows.append(
                (
                    f"{label}: server CPU s per 1,000 requests, max / half rate",
                    f"{ranged(w['cpu_per_1k'], '', 2)} / {ranged(half['cpu_per_1k'], '', 2)}",
                    "-",
                    "-",
                )
            )
            if "pg_cpu_per_1k" in w:
                rows.append(
                    (
                        f"{label}: PostgreSQL CPU s per 1,000 requests, max rate",
                        ranged(w["pg_cpu_per_1k"], "", 2),
                        "-",
                        "-",
                    )
                )
    if "embedded" in res:
        e = res["embedded"]
        rps = e["rps"]["median"]
        rows.append(
            (
                f"2c make run (embedded, SQLite) create+settle: requests/s ({e['conns']} conns)",
                ranged(e["rps"]),
                "≥ 40% of ceiling",
                f"{met(rps / ceil >= 0.4)}; {vs_ceiling(rps)}" if ceil else "-",
            )
        )
        rows.append(
            (
                "2c make run (embedded): p99 at max rate; server CPU s per 1,000 requests",
                f"{ranged(e['p99_ms'], ' ms', 1)}; {ranged(e['cpu_per_1k'], '', 2)}",
                "-",
                f"non-200: {e['non200']}",
            )
        )
    if "sweep" in res:
        s = res["sweep"]
        for key, label in (("none", "none"), ("with", f"{s['settled']:,}")):
            r = s[key]
            rows.append(
                (
                    f"3 sweep {s['count']:,} timeouts, {label} settled present",
                    f"{fmt(r['seconds'], ' s', 1)} ({fmt(r['promises_per_s'])}/s)",
                    "-",
                    "-",
                )
            )
        rows.append(
            (
                "3 sweep time ratio (with / none)",
                f"{s['ratio']:.2f}",
                "≤ 1.2",
                met(s["ratio"] <= 1.2),
            )
        )
    if "drain" in res:
        for key, label in (("sse", "SSE stream"), ("push", "HTTP push (drain_push)")):
            r = res["drain"][key]
            note = met(r["per_s"] >= 5000)
            if key == "sse":
                note += f"; outbox empty after {fmt(r['table_empty_after_s'], ' s', 1)}"
            else:
                note += f"; {r['delivered']:,} delivered in {r['seconds']:.0f} s"
            rows.append(
                (f"4 drain to {label}: messages/s ({r['n']:,})", fmt(r["per_s"]), "≥ 5,000", note)
            )
    if "dispatch" in res:
        d = res["dispatch"]
        rows.append(
            (
                "5 dispatch latency p50",
                fmt(d["dispatch_p50_ms"], " ms", 1),
                "≤ 20 ms",
                met(d["dispatch_p50_ms"] <= 20),
            )
        )
        rows.append(
            (
                "5 dispatch latency p99",
                fmt(d["dispatch_p99_ms"], " ms", 1),
                "≤ 100 ms",
                met(d["dispatch_p99_ms"] <= 100),
            )
        )
    if "timers" in res:
        for key, label in (("embedded", "embedded"), ("celery", "Celery worker + beat")):
            t = res["timers"].get(key)
            if t is None:
                continue
            ok = (
                t["p50_ms"]["median"] <= 10
                and t["p99_ms"]["median"] <= 50
                and t["received"] == t["n"]
            )
            runs = len(t["runs"])
            rows.append(
                (
                    f"5b timer lateness p50 / p99 / max, {label} ({t['per_run']} timers x {runs})",
                    f"{ranged(t['p50_ms'], ' ms', 1)} / {ranged(t['p99_ms'], ' ms', 1)} / "
                    f"{ranged(t['max_ms'], ' ms', 1)}",
                    "≤ 10 ms / ≤ 50 ms",
                    f"{met(ok)}; {t['received']} of {t['n']} fired",
                )
            )
    if "metrics" in res:
        m = res["metrics"]
        rows.append(
            (
                "6 pair throughput, metrics on / off (medians)",
                f"{m['ratio']:.3f} ({fmt(m['on'])} / {fmt(m['off'])} req/s)",
                "≥ 0.95",
                met(m["ratio"] >= 0.95),
            )
        )
    if "dispatch" in res and "from_request_p50_ms" in res["dispatch"]:
        rows.append(
            (
                "5 dispatch from request sent: p50 / p99",
                f"{fmt(res['dispatch']['from_request_p50_ms'], ' ms', 1)} / "
                f"{fmt(res['dispatch']['from_request_p99_ms'], ' ms', 1)}",
                "-",
                f"read round trip p50 {fmt(res['dispatch']['read_rtt_p50_ms'], ' ms', 1)}",
            )
        )
    if "djtasks" in res:
        dj = res["djtasks"]
        for key in ("c1", "c4"):
            run = dj[key]
            rate, cpu = run["per_s"], run["worker_cpu_s_per_1000"]
            rows.append(
                (
                    f"7 Django tasks, one worker, concurrency {run['concurrency']}",
                    f"{fmt(rate['median'], '/s')} ({fmt(rate['min'])}-{fmt(rate['max'])}), "
                    f"{fmt(cpu['median'], ' CPU s', 2)} per 1,000; enqueue "
                    f"{fmt(run['enqueue_per_s']['median'], '/s')}",
                    "-",
                    f"{run['ratio_to_pairs']:.2f} of service pairs "
                    f"({fmt(dj['pairs']['per_s'], '/s')})",
                )
            )
    if "growth" in res:
        g = res["growth"]
        built = f"{g['build']['promises']:,}"
        for key, label in (("pair", "create+settle"), ("cycle", "task cycle")):
            w = g["http"][key]
            rows.append(
                (
                    f"8 growth {label}: req/s with {built} settled / empty",
                    f"{ranged(w['full']['rps'])} / {ranged(w['empty']['rps'])}",
                    "ratio ≥ 0.9",
                    f"{met(w['ratio'] >= 0.9)}; {w['ratio']:.2f}; load average "
                    f"{ranged(w['full']['load_average'], '', 2)} / "
                    f"{ranged(w['empty']['load_average'], '', 2)}",
                )
            )
            rows.append(
                (
                    f"8 growth {label}: CPU s per 1,000 requests server, PostgreSQL: "
                    "settled / empty",
                    f"{ranged(w['full']['cpu_per_1k'], '', 2)}, "
                    f"{ranged(w['full']['pg_cpu_per_1k'], '', 2)} / "
                    f"{ranged(w['empty']['cpu_per_1k'], '', 2)}, "
                    f"{ranged(w['empty']['pg_cpu_per_1k'], '', 2)}",
                    "-",
                    f"p99 {ranged(w['full']['p99_ms'], ' ms', 1)} / "
                    f"{ranged(w['empty']['p99_ms'], ' ms', 1)}",
                )
            )
        b = g["build"]
        rows.append(
            (
                f"8 growth: built {built} settled promises and {b['tasks']:,} tasks with SQL",
                f"{fmt(b['seconds'], ' s')} (insert {fmt(b['insert_seconds'], ' s')}, indexes "
                f"{fmt(b['index_seconds'], ' s')}, VACUUM ANALYZE "
                f"{fmt(b['vacuum_analyze_seconds'], ' s')})",
                "-",
                f"VACUUM after the prune {fmt(g['vacuum_seconds'], ' s', 1)}",
            )
        )
        p = g["prune"]
        for mode, label in (("runner", "the step runner"), ("cli", "resonate prune")):
            m = p[mode]
            how = (
                f"every {m['interval_ms']:,} ms for up to {m['budget_ms']} ms"
                if mode == "runner"
                else "passes back to back"
            )
            rows.append(
                (
                    f"8 growth pruning by {label} (batch {m['batch']}, {how}) under "
                    f"create+settle at {p['rate']:.0f} req/s",
                    f"{ranged(m['rows_per_s'])} rows/s ({ranged(m['promises_per_s'])} promises/s)",
                    "-",
                    f"{m['promises']:,} promises, {m['tasks']:,} tasks deleted",
                )
            )
            rows.append(
                (
                    f"8 growth create+settle p99 at {p['rate']:.0f} req/s, pruning by {label} "
                    "/ not",
                    f"{ranged(m['p99_during_ms'], ' ms', 1)} / "
                    f"{ranged(p['p99_alone_ms'], ' ms', 1)}",
                    "≤ 2x",
                    f"{met(m['p99_ratio'] <= 2)}; {m['p99_ratio']:.2f}x; non-200: {m['non200']}",
                )
            )
        stages = ("sizes_before", "sizes_pruned", "sizes_vacuumed", "sizes_reinserted")
        for table in HOT_TABLES:
            sizes = [g[k][table] for k in stages]
            rows.append(
                (
                    f"8 growth {table}: total size before / pruned / VACUUM / inserted again",
                    " / ".join(mib(x["total"]) for x in sizes),
                    "-",
                    f"heap {mib(sizes[0]['heap'])}, indexes "
                    f"{mib(sum(sizes[0]['indexes'].values()))}; live rows "
                    f"{sizes[0]['live_rows']:,} -> {sizes[2]['live_rows']:,}",
                )
            )
        for table, r in g["reuse"].items():
            rows.append(
                (
                    f"8 growth {table}: heap growth on inserting the pruned count again "
                    "after VACUUM",
                    f"{r['heap_grown']:,} bytes for {r['rows_freed']:,} rows "
                    f"(indexes {r['index_grown']:+,} bytes)",
                    "space reused (no growth)",
                    met(r["reused"])
                    + (
                        f"; VACUUM: {r['vacuum_report']}"
                        if r.get("index_vacuum") == "bypassed"
                        else ""
                    ),
                )
            )
    if "peers" in res:
        rows += peer_rows(res["peers"])
    return rows


def peer_rows(peers: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Issue #28's peer targets: our Tasks backend at least Procrastinate's rate (concurrency 1
    and 4, and enqueue), our workflows at least DBOS's with its pool sized for the load."""
    rows: list[tuple[str, str, str, str]] = []
    summary = peers.get("tasks", {}).get("summary", {})
    ours, pro = summary.get("ours"), summary.get("procrastinate")
    if ours and pro:
        for key, label in (("c1", "concurrency 1"), ("c4", "concurrency 4")):
            if ours.get(key) and pro.get(key):
                a, b = ours[key]["per_s"]["median"], pro[key]["per_s"]["median"]
                ok = "met" if a >= b else "NOT met"
                rows.append(
                    (
                        f"9a Django tasks vs Procrastinate, {label}: tasks/s, ours / theirs",
                        f"{a:,.0f} / {b:,.0f}",
                        "≥ 1.0 x",
                        f"{ok}; {a / b:.2f} x",
                    )
                )
        if ours.get("enqueue_per_s") and pro.get("enqueue_per_s"):
            a, b = ours["enqueue_per_s"]["median"], pro["enqueue_per_s"]["median"]
            rows.append(
                (
                    "9a Django tasks vs Procrastinate, enqueue/s, ours / theirs",
                    f"{a:,.0f} / {b:,.0f}",
                    "≥ 1.0 x",
                    f"{'met' if a >= b else 'NOT met'}; {a / b:.2f} x",
                )
            )
    systems = peers.get("workflows", {}).get("systems", {})
    mine = systems.get("ours", {}).get("per_s")
    theirs = [
        v["per_s"]["median"] for k, v in systems.items() if k.startswith("dbos") and v.get("per_s")
    ]
    if mine and theirs:
        a, b = mine["median"], max(theirs)
        rows.append(
            (
                "9b workflows vs DBOS (its best pool): workflows/s, ours / theirs",
                f"{a:,.1f} / {b:,.1f}",
                "≥ 1.0 x (1.5 x)",
                f"{'met' if a >= b else 'NOT met'}; {a / b:.2f} x",
            )
        )
    return rows


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    head = ("metric", "value", "target", "ratio / met")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(4)]
    line = "  ".join("-" * w for w in widths)
    print(line)
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    print(line)
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
    print(line)


def markdown(rows: list[tuple[str, str, str, str]]) -> str:
    out = ["| metric | value | target | ratio / met |", "|---|---|---|---|"]
    out += [f"| {' | '.join(r)} |" for r in rows]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--pg-url", default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432")
    )
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--quick", action="store_true", help="shorter runs, smaller counts")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/8"),
        help="the broker of the Celery timer run (a Redis database nothing else uses)",
    )
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--growth-promises",
        type=int,
        help="settled promises the growth section builds (default 10,000,000; 1,000,000 quick)",
    )
    parser.add_argument(
        "--markdown", metavar="JSON", help="print a results file's table as Markdown"
    )
    args = parser.parse_args()
    if args.markdown:
        print(markdown(table(json.loads(Path(args.markdown).read_text()))))
        return
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    for tool in ("pgbench", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (make bench installs it with apt-get)")
    q = args.quick
    started = time.perf_counter()
    res: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "quick": q,
    }
    log(f"machine: {res['machine']}")
    with bench_database(args.pg_url, args.keep_db) as db:
        res["machine"]["postgresql"] = db.scalar("SHOW server_version")
        if "ceiling" in only:
            res["ceiling"] = ceiling(db, 2 if q else 4, [1, 2, 4, 8, 16])
        if "http" in only:
            res["http"] = http(db, 3 if q else 5, [8] if q else [4, 8, 16], 5 if q else 10, REPEATS)
        if "embedded" in only:
            res["embedded"] = embedded(db, 3 if q else 5, [4] if q else [2, 4, 8], REPEATS)
        if "dispatch" in only:
            res["dispatch"] = dispatch(db, 100 if q else 300)
        if "timers" in only:
            res["timers"] = timer_lateness(db, 100 if q else 300, 5_000, args.redis_url, REPEATS)
        if "drain" in only:
            n = 5_000 if q else 20_000
            res["drain"] = {"sse": sse_drain(db, n, 60), "push": push_drain(db, n, 30)}
            rates = {k: f"{v['per_s']:.0f}/s" for k, v in res["drain"].items()}
            log(f"drain: {rates}")
        if "metrics" in only:
            res["metrics"] = metrics_cost(db, 3 if q else 5, 3 if q else 5)
        if "djtasks" in only:
            res["djtasks"] = djtasks(db, 1_000 if q else 2_000, 60, REPEATS)
        if "peers" in only:
            res["peers"] = {
                "tasks": peer_tasks.run(args.pg_url, 500 if q else 2_000, REPEATS),
                "workflows": peer_workflows(args.pg_url, q),
            }
        if "sweep" in only:
            count, settled = (20_000, 200_000) if q else (100_000, 1_000_000)
            res["sweep"] = sweep(db, count, settled, 240)
        if "growth" in only:
            n = args.growth_promises or (1_000_000 if q else 10_000_000)
            res["growth"] = growth(args.pg_url, args.keep_db, db, n, 3 if q else 5, REPEATS)
    res["seconds"] = time.perf_counter() - started
    res["table"] = table(res)
    print()
    print_table(res["table"])
    if "peers" in res:
        print()
        peer_tasks.print_table(res["peers"]["tasks"]["table"])
        print()
        print(res["peers"]["workflows"]["wide"])
    print(
        f"total {res['seconds']:.0f} s; load average at start {res['machine']['loadavg_start']:.2f}"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
