"""Durable three-step workflows side by side: ``resonate-sdk`` on our server against DBOS Transact,
on the same PostgreSQL, in one run.

The workload: ``count`` workflows, each three durable steps in sequence (plain functions that
add), at most ``in_flight`` outstanding at once, started by a client and run by one worker process.
Systems (each row a key of the results):

* ``ours``: the production shape (docs/how-to/production.md): a fresh database
  ``resonate_bench_<random>`` (bench/run.py's ``bench_database``), ``manage.py serve --workers 2
  --no-embedded`` on 127.0.0.1, one Celery worker and one beat on Redis. One SDK process
  (``resonate-sdk`` 0.8.1, the ``.e2e/py`` virtualenv) registers the workflow and starts each one
  with ``resonate.run``: it creates and acquires the task and runs it (bench/peers/sdk_app.py
  ``one``). This is the baseline of the ratios: DBOS's app process also starts and runs.
* ``ours-rpc``: the same servers; the workflow runs in an SDK worker process (group
  ``peers-worker``), started by a second SDK process with ``rpc``, which hears of each result by
  an ``unblock`` on its stream. Both processes' CPU is counted, apart.
* ``ours-embedded``: ``manage.py serve`` with its embedded runner on a fresh SQLite file (``make
  run``'s shape) and the ``one`` SDK process (no PostgreSQL in it).
* ``dbos`` and ``dbos-pool40``: one DBOS Transact app process (``dbos>=3.4,<3.5`` in
  ``.peers/dbos``, made here from PyPI; bench/peers/dbos_app.py) on a fresh system database
  ``dbos_bench_<random>``: an async ``@DBOS.workflow()`` of three async ``@DBOS.step()``s, each
  started with ``DBOS.start_workflow_async`` (the client's lanes bound it to ``in_flight``), its
  system database pool at DBOS's default (20), then at 40. ``--dbos-queue`` adds a row that
  enqueues on a DBOS queue (``worker_concurrency=in_flight``, default 1 s polling) instead.

The run goes in ``repeats`` rounds; each round starts every system's processes afresh, warms it up
(``in_flight`` workflows, not measured) and measures one batch, in an order rotated by one
each round. Every figure is the median of the rounds with their min and max. Latency is per
workflow, from the client's start call to its result in the client; throughput is completed
workflows over the time from the first start to the last completion. CPU seconds per 1,000
workflows are taken per process group (each process with its children) around each measured
batch, and for PostgreSQL from /proc: the backends connected to the system's database (by process
title, sampled every 0.25 s, so backends that come and go are counted) and the server's background
processes (checkpointer, WAL writer...), which other work on the machine shares. In the first
round each system also sits idle for 5 s after its warm-up: the CPU seconds per second it spends
doing nothing (polls, ticks, heartbeats), which any run pays for by the second, so a slower run
costs more CPU per workflow.

    .venv/bin/python -m bench.peers.workflows [--count 500] [--in-flight 32] [--repeats 3]
        [--quick] [--pg-url postgresql://postgres@127.0.0.1:5432] [--json out.json]

All traffic goes to 127.0.0.1; every batch is bounded (300 s); processes and databases are removed
on the way out, failure or not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import queue
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PEERS = BENCH / "peers"
# bench/run.py is a script whose siblings (dispatch_latency, timers) are imported bare: it is
# imported here as the module ``run`` from bench/, the name mypy gives it too.
for _path in (ROOT, BENCH):
    if str(_path) not in sys.path:
        sys.path.append(str(_path))

import run as bench  # noqa: E402

from tests.e2e import tools  # noqa: E402

DBOS_REQUIREMENT = "dbos>=3.4,<3.5"
DBOS_VENV = ROOT / ".peers" / "dbos"
REDIS_URL = "redis://127.0.0.1:6379/13"  # a Redis database of its own: Celery's queue lives there
RUN_LIMIT_S = 300.0  # one batch of workflows
START_LIMIT_S = 120.0  # a program's READY
BASELINE = "ours"
SDK_PROGRAM = PEERS / "sdk_app.py"
DBOS_PROGRAM = PEERS / "dbos_app.py"
PG_INTERVAL_S = 0.25
IDLE_S = 5.0  # the idle window, in the first round only
RATIO_METRICS = ("per_s", "p50_ms", "p99_ms", "cpu_total", "cpu_postgres")
PG_BACKGROUND = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum launcher",
    "logical replication launcher",
    "stats collector",
    "archiver",
)

log = bench.log


class Unavailable(Exception):
    """A system cannot be run here (the message says why); its rows are skipped."""


# --- the virtualenvs -----------------------------------------------------------------------------


def sdk_python() -> Path:
    """``.e2e/py``: Python >= 3.12 with ``resonate-sdk`` 0.8.1 (the end-to-end suite's helper)."""
    try:
        return tools.python_sdk().python
    except tools.Missing as exc:
        raise Unavailable(f"resonate-sdk: {exc}") from exc


def dbos_python() -> Path:
    """``.peers/dbos``: Python >= 3.12 with DBOS Transact 3.4.x from PyPI, made once."""
    python = DBOS_VENV / "bin" / "python"
    stamp = DBOS_VENV / ".installed"
    probe = [str(python), "-c", "import dbos"]
    if (
        stamp.is_file()
        and stamp.read_text() == DBOS_REQUIREMENT
        and python.exists()
        and subprocess.run(probe, capture_output=True, timeout=120, check=False).returncode == 0
    ):
        return python
    stamp.unlink(missing_ok=True)
    try:
        base = tools.find_python()
    except tools.Missing as exc:
        raise Unavailable(f"DBOS: {exc}") from exc
    log(f"creating {DBOS_VENV.relative_to(ROOT)} ({DBOS_REQUIREMENT})")
    steps = [
        [base, "-m", "venv", "--clear", str(DBOS_VENV)],
        [str(python), "-m", "pip", "install", "-q", DBOS_REQUIREMENT],
    ]
    for argv in steps:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Unavailable(f"DBOS: {' '.join(argv)}: {exc}") from exc
        if done.returncode != 0:
            raise Unavailable(f"DBOS: {' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    stamp.write_text(DBOS_REQUIREMENT)
    return python


def program_env() -> dict[str, str]:
    """A peer program's environment: nothing of the server's, the tests' or DBOS's own variables
    (no conductor key, no cloud flag), no tracing exporters."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "DJANGO_", "PYTEST_", "CELERY_", "DBOS", "OTEL_"))
        and k not in {"DATABASE_URL", "PYTHONPATH", "VIRTUAL_ENV"}
    }
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# --- a peer program ------------------------------------------------------------------------------


class Peer:
    """A program of bench/peers (sdk_app.py, dbos_app.py) that speaks bench/peers/peer_drive.py's
    protocol: ``READY``, then one ``RESULT {...}`` line per command line."""

    def __init__(self, name: str, argv: list[str], logdir: Path) -> None:
        self.name = name
        self.logfile = logdir / f"{name}-{secrets.token_hex(3)}.log"
        self.lines: queue.Queue[str | None] = queue.Queue()
        with self.logfile.open("wb") as err:
            self.proc = subprocess.Popen(
                argv,
                cwd=PEERS,
                env=program_env(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                start_new_session=True,  # its own group: stopped with its children
            )
        assert self.proc.stdout is not None
        threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-30:])
        return ""

    def expect(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self.name}: no {prefix} within {timeout:.0f}s\n{self.tail()}")
            try:
                line = self.lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"{self.name} exited ({self.proc.poll()}):\n{self.tail()}")
            if line.startswith(prefix):
                return line[len(prefix) :].strip()

    def ready(self) -> Peer:
        self.expect("READY", START_LIMIT_S)
        return self

    def batch(self, count: int, in_flight: int, prefix: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        cmd = {"count": count, "in_flight": in_flight, "prefix": prefix, "timeout_s": RUN_LIMIT_S}
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        result: dict[str, Any] = json.loads(self.expect("RESULT", RUN_LIMIT_S + 60))
        return result

    def cpu_seconds(self) -> float:
        return bench.tree_cpu_seconds(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # the programs end when stdin closes
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, 15)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.proc.pid, 9)
                    self.proc.wait(5)


# --- PostgreSQL's CPU ----------------------------------------------------------------------------


class PgCpu:
    """CPU seconds the PostgreSQL server at ``server_url`` spends for some databases while it
    runs: the backends connected to them, told by their process titles (``postgres: ... user db
    host(port) state``), plus the server's own background processes (the postmaster's children
    that serve no database: checkpointer, WAL writer...). Only that server's processes count (the
    postmaster's children), not another cluster's. Sampled every 0.25 s in a thread, so a backend
    that exits meanwhile counts up to its last sample; one that starts counts from zero."""

    def __init__(self, server_url: str, databases: list[str]) -> None:
        admin = f"{server_url.rstrip('/')}/postgres"
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        stat = Path(f"/proc/{row[0]}/stat").read_text()
        self.postmaster = int(stat[stat.rindex(")") + 2 :].split()[1])
        self.databases = set(databases)
        self.base: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.kind: dict[int, str] = {}  # pid -> "db" or "bg" (others are left out)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self._sample(first=True)
        self.thread.start()

    def _classify(self, pid: int) -> str:
        if pid == self.postmaster:
            return "bg"
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return ""
        if set(title.split()) & self.databases:
            return "db"
        if any(name in title for name in PG_BACKGROUND):
            return "bg"
        return ""  # another database's backend, or one not yet titled: looked at again

    def _sample(self, first: bool = False) -> None:
        for pid, name, f in bench.proc_stats():
            if name != "postgres" or (pid != self.postmaster and int(f[1]) != self.postmaster):
                continue
            kind = self.kind.get(pid) or self._classify(pid)
            if not kind:
                continue
            self.kind[pid] = kind
            ticks = int(f[11]) + int(f[12])
            if pid not in self.base:
                self.base[pid] = ticks if first else 0
            self.last[pid] = ticks

    def _loop(self) -> None:
        while not self.stop_event.wait(PG_INTERVAL_S):
            self._sample()

    def backends(self) -> int:
        """Backends of the databases seen during the run (their connections)."""
        return sum(1 for kind in self.kind.values() if kind == "db")

    def stop(self) -> dict[str, float]:
        self.stop_event.set()
        self.thread.join(5)
        self._sample()
        out = {"db": 0.0, "bg": 0.0}
        for pid, ticks in self.last.items():
            out[self.kind[pid]] += (ticks - self.base[pid]) / bench.CLOCK_TICKS
        return out


# --- measuring -----------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Nearest rank."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


@dataclass
class System:
    """One row: the program that starts the workflows, and the process groups whose CPU counts."""

    key: str
    label: str
    driver: Peer
    groups: dict[str, Callable[[], float]]
    databases: list[str]  # PostgreSQL databases it uses (none: no PostgreSQL)
    pg_url: str  # the server they are on
    notes: dict[str, Any] = field(default_factory=dict)


def idle_cpu(system: System, seconds: float) -> dict[str, float]:
    """CPU seconds per second each group (and PostgreSQL for its databases) spends with nothing
    to run: the polls, ticks, keep-alives and heartbeats that any run pays for by the second."""
    before = {name: cpu() for name, cpu in system.groups.items()}
    pg = PgCpu(system.pg_url, system.databases) if system.databases else None
    time.sleep(seconds)
    out = {name: (fn() - before[name]) / seconds for name, fn in system.groups.items()}
    if pg is not None:
        pg_cpu = pg.stop()
        out["postgres"] = (pg_cpu["db"] + pg_cpu["bg"]) / seconds
    out["total"] = sum(out.values())
    return out


def measure_once(
    system: System, count: int, in_flight: int, label: str, idle_s: float
) -> dict[str, Any]:
    """A warm-up of ``in_flight`` workflows (not measured: one wave opens every connection the
    load needs), the idle cost over ``idle_s`` seconds if asked, then ``count`` workflows."""
    warm = min(count, in_flight)
    warmed = system.driver.batch(warm, in_flight, f"{system.key}-warm-{secrets.token_hex(3)}")
    if warmed["completed"] != warm:
        raise RuntimeError(f"{system.key}: warm-up completed {warmed['completed']}/{warm}")
    idle = idle_cpu(system, idle_s) if idle_s > 0 else None
    if idle is not None:
        log(f"{system.key}: idle CPU s/s: " + ", ".join(f"{k} {v:.3f}" for k, v in idle.items()))
    load = bench.log_load(f"{system.key}, {label}")
    before = {name: cpu() for name, cpu in system.groups.items()}
    pg = PgCpu(system.pg_url, system.databases) if system.databases else None
    res = system.driver.batch(count, in_flight, f"{system.key}-{secrets.token_hex(4)}")
    pg_cpu = pg.stop() if pg is not None else None
    cpu = {name: fn() - before[name] for name, fn in system.groups.items()}
    done = res["completed"]
    lat = res.pop("latencies_ms")
    run: dict[str, Any] = {
        **res,
        "load_avg": load,
        "per_s": done / res["seconds"] if res["seconds"] > 0 else 0.0,
        "p50_ms": percentile(lat, 0.50),
        "p99_ms": percentile(lat, 0.99),
        "cpu_s": cpu,
        "pg_cpu_s": pg_cpu,
        "pg_backends": pg.backends() if pg is not None else None,
        "idle_cpu_s_per_s": idle,
    }
    per_k = {name: s / max(done, 1) * 1000 for name, s in cpu.items()}
    if pg_cpu is not None:
        per_k["postgres"] = (pg_cpu["db"] + pg_cpu["bg"]) / max(done, 1) * 1000
    per_k["total"] = sum(per_k.values())
    run["cpu_s_per_1000"] = per_k
    run["ok"] = done == count and not res["failed"] and not res["wrong"]
    log(
        f"{system.key}, {label}: {done}/{count} {'ok' if run['ok'] else 'NOT OK'}, "
        f"{run['per_s']:.1f} workflows/s, p50 {run['p50_ms']:.0f} ms, "
        f"p99 {run['p99_ms']:.0f} ms, CPU s/1000: "
        + ", ".join(f"{k} {v:.2f}" for k, v in per_k.items())
    )
    if res["failures"]:
        log(f"{system.key}: failures {res['failures']}")
    return run


def summarise(system: System, runs: list[dict[str, Any]]) -> dict[str, Any]:
    groups = list(runs[0]["cpu_s_per_1000"])
    return {
        "label": system.label,
        "ok": len(runs) > 0 and all(r["ok"] for r in runs),
        "per_s": bench.spread([r["per_s"] for r in runs]),
        "p50_ms": bench.spread([r["p50_ms"] for r in runs]),
        "p99_ms": bench.spread([r["p99_ms"] for r in runs]),
        "cpu_s_per_1000": {g: bench.spread([r["cpu_s_per_1000"][g] for r in runs]) for g in groups},
        "load_avg": [r["load_avg"] for r in runs],
        "idle_cpu_s_per_s": next(
            (r["idle_cpu_s_per_s"] for r in runs if r["idle_cpu_s_per_s"]), None
        ),
        "notes": system.notes,
        "runs": runs,
    }


# --- the systems ---------------------------------------------------------------------------------
#
# A setup starts the processes its rows share (our web and Celery processes) on an ExitStack that
# stops them; each row then starts its own client and worker programs on a stack of its own. Every
# round starts every setup afresh, in an order rotated by one each round, so that each system's
# runs are spread over the whole run rather than bunched in one stretch of a noisy machine.

Row = Callable[[contextlib.ExitStack[Any], Any], System]


@dataclass
class Setup:
    name: str
    shared: Callable[[contextlib.ExitStack[Any]], Any]
    rows: list[Row]


@dataclass
class Shared:
    """What a production round's rows share: the web address and the server's process groups."""

    url: str
    groups: dict[str, Callable[[], float]]


def started(stack: contextlib.ExitStack[Any], peer: Peer) -> Peer:
    stack.callback(peer.stop)
    return peer.ready()


def production_setup(
    db: bench.Database, redis_url: str, python: Path, logdir: Path, pg_url: str
) -> Setup:
    notes = {"web_processes": 2, "celery": "1 worker (prefork, its default concurrency) + beat"}

    def shared(stack: contextlib.ExitStack[Any]) -> Shared:
        celery = bench.CeleryRunner(db, redis_url)
        stack.callback(celery.stop)
        server = stack.enter_context(
            bench.Server(db, workers=2, env={"CELERY_BROKER_URL": redis_url})
        )
        log(f"ours: serve --workers 2 --no-embedded on {server.url}, Celery worker and beat")
        worker, beat = celery.procs

        def celery_cpu() -> float:
            return bench.tree_cpu_seconds(worker.pid) + bench.tree_cpu_seconds(beat.pid)

        return Shared(server.url, {"web": server.cpu_seconds, "celery": celery_cpu})

    def one(stack: contextlib.ExitStack[Any], ctx: Shared) -> System:
        sdk = started(stack, sdk_peer("one", ctx.url, logdir, python))
        groups = {**ctx.groups, "sdk": sdk.cpu_seconds}
        label = "ours, production (one SDK process: run)"
        return System(BASELINE, label, sdk, groups, [db.name], pg_url, notes)

    def rpc(stack: contextlib.ExitStack[Any], ctx: Shared) -> System:
        worker = started(stack, sdk_peer("worker", ctx.url, logdir, python))
        client = started(stack, sdk_peer("client", ctx.url, logdir, python))
        groups = {**ctx.groups, "sdk_worker": worker.cpu_seconds, "sdk_client": client.cpu_seconds}
        label = "ours, production (SDK client rpc -> SDK worker)"
        return System("ours-rpc", label, client, groups, [db.name], pg_url, notes)

    return Setup("ours", shared, [one, rpc])


def embedded_setup(db: bench.Database, sqlite: str, python: Path, logdir: Path) -> Setup:
    """``make run``'s shape: one ``serve`` process with its embedded runner, on SQLite."""

    def shared(stack: contextlib.ExitStack[Any]) -> bench.Server:
        server = stack.enter_context(bench.Server(db, embedded=True, env={"DATABASE_URL": sqlite}))
        log(f"ours-embedded: serve (embedded runner, SQLite) on {server.url}")
        return server

    def one(stack: contextlib.ExitStack[Any], server: bench.Server) -> System:
        sdk = started(stack, sdk_peer("one", server.url, logdir, python))
        groups = {"web": server.cpu_seconds, "sdk": sdk.cpu_seconds}
        label = "ours, embedded on SQLite (one SDK process: run)"
        notes = {"web_processes": 1, "database": "SQLite"}
        return System("ours-embedded", label, sdk, groups, [], "", notes)

    return Setup("ours-embedded", shared, [one])


def dbos_setup(
    key: str,
    label: str,
    python: Path,
    pg_url: str,
    database: str,
    pool: str,
    mode: str,
    in_flight: int,
    logdir: Path,
) -> Setup:
    def app(stack: contextlib.ExitStack[Any], _: Any) -> System:
        url = f"{pg_url.rstrip('/')}/{database}"
        argv = [str(python), str(DBOS_PROGRAM), url, pool, mode, str(in_flight)]
        peer = started(stack, Peer(key, argv, logdir))
        notes = {"sys_db_pool_size": pool, "start": mode, "database": database}
        return System(key, label, peer, {"app": peer.cpu_seconds}, [database], pg_url, notes)

    return Setup(key, lambda stack: None, [app])


def sdk_peer(mode: str, url: str, logdir: Path, python: Path) -> Peer:
    return Peer(f"sdk-{mode}", [str(python), str(SDK_PROGRAM), mode, url], logdir)


@contextlib.contextmanager
def dbos_database(pg_url: str) -> Iterator[str]:
    name = f"dbos_bench_{secrets.token_hex(4)}"
    admin = f"{pg_url.rstrip('/')}/postgres"
    with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield name
    finally:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
        log(f"dropped database {name}")


def dbos_version(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('dbos'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout.strip()


def prepare(
    resources: contextlib.ExitStack[Any],
    pg_url: str,
    redis_url: str,
    in_flight: int,
    logdir: Path,
    options: dict[str, bool],
    res: dict[str, Any],
) -> list[Setup]:
    """The virtualenvs and the databases (kept for the whole run, dropped by ``resources``), and
    the setups that can run here; what cannot is recorded under ``res["skipped"]``."""
    setups: list[Setup] = []
    try:
        python = sdk_python()
    except Unavailable as exc:
        res["skipped"]["ours"] = str(exc)
        log(f"ours: skipped ({exc})")
    else:
        db = resources.enter_context(bench.bench_database(pg_url, keep=False))
        why_not = bench.broker_reachable(redis_url)
        if why_not:
            res["skipped"]["ours"] = f"no Redis at {redis_url}: {why_not}"
            log(f"ours: production shape skipped ({res['skipped']['ours']})")
        else:
            setups.append(production_setup(db, redis_url, python, logdir, pg_url))
        if options["embedded"]:
            sqlite = f"sqlite:///{logdir / 'embedded.sqlite3'}"
            log("ours-embedded: migrating a fresh SQLite file")
            subprocess.run(
                [bench.PY, "manage.py", "migrate", "-v0", "--noinput"],
                cwd=ROOT,
                env=bench.env_for(db, DATABASE_URL=sqlite),
                check=True,
                timeout=300,
            )
            setups.append(embedded_setup(db, sqlite, python, logdir))
    if options["dbos"]:
        try:
            dbos = dbos_python()
        except Unavailable as exc:
            res["skipped"]["dbos"] = str(exc)
            log(f"dbos: skipped ({exc})")
        else:
            version = res["dbos_version"] = dbos_version(dbos)
            rows = [
                ("dbos", "default", "direct", f"DBOS {version} (default pool: 20)"),
                ("dbos-pool40", "40", "direct", f"DBOS {version} (pool 40)"),
            ]
            if options["dbos_queue"]:
                rows.append(("dbos-queue", "40", "queue", f"DBOS {version} (queue, pool 40)"))
            for key, pool, mode, label in rows:
                database = resources.enter_context(dbos_database(pg_url))
                setups.append(
                    dbos_setup(key, label, dbos, pg_url, database, pool, mode, in_flight, logdir)
                )
    return setups


def ratios(res: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each other system's medians over the baseline's (ours = 1.0)."""
    base = res["systems"].get(BASELINE)
    if base is None:
        return {}
    out: dict[str, dict[str, float]] = {}
    for key, sys_ in res["systems"].items():
        if key == BASELINE:
            continue
        r = {m: sys_[m]["median"] / base[m]["median"] for m in ("per_s", "p50_ms", "p99_ms")}
        for g in ("total", "postgres"):
            mine, theirs = sys_["cpu_s_per_1000"].get(g), base["cpu_s_per_1000"].get(g)
            if mine is not None and theirs is not None and theirs["median"] > 0:
                r[f"cpu_{g}"] = mine["median"] / theirs["median"]
        out[key] = r
    return out


def run(
    pg_url: str,
    count: int,
    in_flight: int,
    repeats: int,
    *,
    redis_url: str = REDIS_URL,
    embedded: bool = True,
    dbos: bool = True,
    dbos_queue: bool = False,
) -> dict[str, Any]:
    """Every system ``repeats`` times, in rounds; the results (bench/run.py keeps them under a
    key). A system that fails is recorded under ``errors`` and the others go on."""
    started_at = time.perf_counter()
    res: dict[str, Any] = {
        "count": count,
        "in_flight": in_flight,
        "repeats": repeats,
        "baseline": BASELINE,
        "loadavg_start": bench.load_average(),
        "systems": {},
        "skipped": {},
        "errors": {},
    }
    options = {"embedded": embedded, "dbos": dbos, "dbos_queue": dbos_queue}
    logdir = Path(tempfile.mkdtemp(prefix="resonate-peers-"))
    logdir.chmod(0o755)
    runs: dict[str, list[dict[str, Any]]] = {}
    systems: dict[str, System] = {}
    try:
        with contextlib.ExitStack() as resources:
            setups = prepare(resources, pg_url, redis_url, in_flight, logdir, options, res)
            for r in range(repeats):
                shift = r % max(len(setups), 1)
                for setup in setups[shift:] + setups[:shift]:
                    if setup.name in res["errors"]:
                        continue
                    try:
                        with contextlib.ExitStack() as shared:
                            ctx = setup.shared(shared)
                            for row in setup.rows:
                                with contextlib.ExitStack() as own:
                                    system = row(own, ctx)
                                    systems.setdefault(system.key, system)
                                    label = f"round {r + 1}/{repeats}"
                                    idle = IDLE_S if r == 0 else 0.0
                                    one = measure_once(system, count, in_flight, label, idle)
                                    runs.setdefault(system.key, []).append(one)
                    except Exception as exc:
                        res["errors"][setup.name] = f"{type(exc).__name__}: {exc}"[:4000]
                        log(f"{setup.name}: FAILED, left out of later rounds: {exc}")
    finally:
        if res["errors"]:
            log(f"the programs' logs are kept in {logdir}")
        else:
            shutil.rmtree(logdir, ignore_errors=True)
    for key, system in systems.items():
        if runs.get(key):
            res["systems"][key] = summarise(system, runs[key])
    res["ratios"] = ratios(res)
    res["seconds"] = time.perf_counter() - started_at
    return res


# --- the table -----------------------------------------------------------------------------------


def _r(s: dict[str, Any], digits: int = 0) -> str:
    """The median, with (min..max) when there were several runs."""
    if len(s["runs"]) == 1:
        return bench.fmt(s["median"], "", digits)
    return bench.ranged(s, "", digits)


def wide_rows(res: dict[str, Any]) -> list[list[str]]:
    head = [
        "system",
        "workflows/s",
        "p50 ms",
        "p99 ms",
        "CPU s/1000 by group (medians)",
        "PostgreSQL",
        "all",
        "idle CPU s/s",
        "load",
        "vs ours: wf/s, p50, p99, all CPU, PG CPU",
    ]
    rows = [head]
    for key, s in res["systems"].items():
        cpu, idle = s["cpu_s_per_1000"], s["idle_cpu_s_per_s"]
        groups = ", ".join(
            f"{g} {v['median']:.1f}" for g, v in cpu.items() if g not in ("postgres", "total")
        )
        pg = _r(cpu["postgres"], 1) if "postgres" in cpu else "- (SQLite)"
        ratio = res["ratios"].get(key)
        vs = "1 (baseline)" if key == BASELINE else "-"
        if ratio:
            vs = ", ".join(
                "-" if ratio.get(m) is None else f"{ratio[m]:.2f}" for m in RATIO_METRICS
            )
        rows.append(
            [
                s["label"] + ("" if s["ok"] else " [NOT OK]"),
                _r(s["per_s"], 1),
                _r(s["p50_ms"]),
                _r(s["p99_ms"]),
                groups,
                pg,
                _r(cpu["total"], 1),
                "-" if idle is None else f"{idle['total']:.3f}",
                "/".join(f"{x:.1f}" for x in s["load_avg"]),
                vs,
            ]
        )
    return rows


def print_wide(res: dict[str, Any]) -> None:
    rows = wide_rows(res)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rule = "  ".join("-" * w for w in widths)
    print(rule)
    for n, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            print(rule)
    print(rule)
    for key, why in res["skipped"].items():
        print(f"skipped {key}: {why}")


def markdown(res: dict[str, Any]) -> str:
    rows = wide_rows(res)
    out = [f"| {' | '.join(rows[0])} |", "|" + "---|" * len(rows[0])]
    out += [f"| {' | '.join(r)} |" for r in rows[1:]]
    return "\n".join(out)


def table(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(metric, value, target, ratio) rows in bench/run.py's shape; the ratio is to ours."""
    out: list[tuple[str, str, str, str]] = []
    for key, s in res["systems"].items():
        ratio = res["ratios"].get(key, {})
        x = {m: "-" if ratio.get(m) is None else f"{ratio[m]:.2f}" for m in RATIO_METRICS}
        if key == BASELINE:
            x = dict.fromkeys(RATIO_METRICS, "1.0 (baseline)")
        cpu = s["cpu_s_per_1000"]
        latency = f"{_r(s['p50_ms'])} / {_r(s['p99_ms'])}"
        out.append((f"peers {key}: workflows/s", _r(s["per_s"], 1), "", x["per_s"]))
        out.append((f"peers {key}: p50 / p99 ms", latency, "", x["p50_ms"]))
        out.append((f"peers {key}: CPU s / 1000 (all)", _r(cpu["total"], 2), "", x["cpu_total"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--pg-url", default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432")
    )
    parser.add_argument("--redis-url", default=os.environ.get("BENCH_PEERS_REDIS_URL", REDIS_URL))
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="count 100, repeats 1")
    parser.add_argument("--no-embedded", action="store_true", help="leave out ours on SQLite")
    parser.add_argument("--dbos-queue", action="store_true", help="add DBOS through a queue")
    parser.add_argument("--json", metavar="PATH", help="write the results there")
    args = parser.parse_args()
    count, repeats = (100, 1) if args.quick else (args.count, args.repeats)
    if count < 1 or args.in_flight < 1 or repeats < 1:
        raise SystemExit("--count, --in-flight and --repeats must be positive")
    res = run(
        args.pg_url,
        count,
        args.in_flight,
        repeats,
        redis_url=args.redis_url,
        embedded=not args.no_embedded,
        dbos_queue=args.dbos_queue,
    )
    print()
    print(
        f"{count} workflows x 3 steps, {args.in_flight} in flight, median (min..max) of {repeats}"
    )
    print_wide(res)
    print(f"total {res['seconds']:.0f} s; load average at start {res['loadavg_start']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
