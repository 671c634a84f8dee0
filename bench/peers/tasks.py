"""Background-task backends side by side, on the same PostgreSQL, on this machine, in one run.

The project's ``django.tasks`` backend (``tasks_app.backends.ResonateBackend`` with
``manage.py resonate worker``) and three peers, each through its own worker:

- ``procrastinate``: Procrastinate 3.10 through ``procrastinate.contrib.django``,
  ``manage.py procrastinate worker --concurrency N`` (one process; sync tasks in threads);
- ``tasksdb``: django-tasks-db 0.13, the ORM database backend of Django's Tasks framework, with
  its ``db_worker`` command. The command runs one task at a time and has no concurrency option,
  so "concurrency 4" is four ``db_worker`` processes (distinct ``--worker-id``: how it runs in
  parallel), their CPU added up;
- ``celery``: Celery 5 on the Redis broker, ``celery worker --pool prefork --concurrency N``,
  enqueued with ``.delay()``; no result backend: each task counts itself with one ``INCR`` on a
  Redis key the harness reads. Prefetch and acknowledgement at Celery's defaults (the message is
  acked before the task runs); gossip, mingle, heartbeat and remote control off (broker chatter
  that is no part of running tasks). Celery never touches PostgreSQL: its site's database is
  created and migrated like the others' and left unused, so its PostgreSQL figure is the server's
  own background work.

For each backend, in turn within each repeat and each concurrency (A B C D at 1, A B C D at 4,
then again: drift is shared), ``count`` no-op tasks are enqueued (timed: the enqueue rate), then
one worker drains them. The timed window runs from the first task seen finished to the last (the
harness counts finished tasks every 20 ms: the project's promises resolved, Procrastinate's jobs
succeeded, django-tasks-db's results successful, Celery's counter), so a worker's start-up
(imports, Django's setup, connecting) is left out of every backend's figure alike and reported
apart. Over that window: tasks/s, the worker's process tree's CPU seconds per 1,000 tasks
(/proc utime + stime, children included), and PostgreSQL's (every postgres process but the
backends connected to other databases and the harness's own, read every 0.5 s so a backend that
exits keeps what it used). Each figure is the median of ``repeats`` runs with min and max; the
1-minute load average is logged before every run; each peer's median is also given as a ratio to
the project's (ours = 1.0).

Every backend has a fresh database of its own on the server (created, migrated, dropped by this
script); every Django site keeps its connections (``CONN_MAX_AGE`` 600, as the project's
settings do on PostgreSQL); every worker polls for work every 20 ms when idle (the project's
``POLL_INTERVAL_MS`` here, as in bench/run.py) and logs nothing per task. The peers run in a
virtualenv this script makes under ``.peers/tasks`` (their versions pinned below); their minimal
Django sites are in ``bench/peers/sites``.

    .venv/bin/python -m bench.peers.tasks [--count 2000] [--repeats 3] [--quick]
        [--pg-url postgresql://postgres@127.0.0.1:5432] [--json bench/results/peers-tasks.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

import psycopg
import redis

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
SITES = BENCH / "peers" / "sites"
VENV = ROOT / ".peers" / "tasks"
PEER_PY = VENV / "bin" / "python"
STAMP = VENV / "bench-requirements.txt"
RESULTS = BENCH / "results" / "peers-tasks.json"
REQUIREMENTS = (
    "Django>=6.0,<6.1",
    "procrastinate>=3.10,<3.11",
    "django-tasks-db>=0.13,<0.14",
    "celery[redis]>=5.5,<5.8",
    "psycopg[binary]>=3.3,<3.4",
)
BACKENDS = ("ours", "procrastinate", "tasksdb", "celery")
LABELS = {
    "ours": "django-resonate",
    "procrastinate": "Procrastinate",
    "tasksdb": "django-tasks-db",
    "celery": "Celery+Redis",
}
CONCURRENCY = (1, 4)
POLL_S = 0.02  # how often the harness counts finished tasks
SAMPLE_S = 0.5  # how often it reads every PostgreSQL process's CPU time
IDLE_POLL_S = 0.02  # each worker's idle poll: ours' POLL_INTERVAL_MS=20, as bench/run.py's
START_S = 120  # a worker that has finished no task by then has failed
LOOPBACK = ("127.0.0.1", "localhost", "::1")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
OTHER_BACKENDS = (
    "SELECT pid FROM pg_stat_activity"
    " WHERE (datname IS NOT NULL AND datname <> current_database()) OR pid = pg_backend_pid()"
)


def helpers() -> ModuleType:
    """bench/run.py (its Database, bench_database, env_for, djtool and /proc readers), imported
    when first needed: run.py runs with bench/ on sys.path and may import this module (when it
    is the program itself, its ``__main__`` module is used rather than loaded twice)."""
    main = sys.modules.get("__main__")
    if Path(getattr(main, "__file__", None) or "/").resolve() == BENCH / "run.py":
        assert main is not None
        return main
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import run

    return run


def log(msg: str) -> None:
    helpers().log(msg)


def loopback(url: str) -> str:
    host = urlsplit(url).hostname
    if host not in LOOPBACK:
        raise SystemExit(f"{url}: this benchmark talks to this machine's loopback only")
    return url


# --- the peers' virtualenv ------------------------------------------------------------------------


def base_python() -> str:
    """A Python >= 3.12: the base interpreter of the project's .venv, else python3.12/3.13."""
    run = helpers()
    candidates = [
        subprocess.run(
            [run.PY, "-c", "import sys; print(sys._base_executable)"],
            capture_output=True,
            text=True,
            timeout=60,
        ).stdout.strip(),
        *(shutil.which(f"python3.{minor}") or "" for minor in (13, 12, 14)),
    ]
    for python in candidates:
        if not python:
            continue
        ok = subprocess.run(
            [python, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"], timeout=60
        )
        if ok.returncode == 0:
            return python
    raise SystemExit("no Python >= 3.12 found for the peers' virtualenv")


def peers_venv() -> None:
    """Make .peers/tasks and install the peers, unless it holds exactly these requirements."""
    wanted = "\n".join(REQUIREMENTS) + "\n"
    if PEER_PY.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return
    log(f"peers: creating {VENV.relative_to(ROOT)} and installing {', '.join(REQUIREMENTS)}")
    subprocess.run([base_python(), "-m", "venv", "--clear", str(VENV)], check=True, timeout=300)
    subprocess.run(
        [str(PEER_PY), "-m", "pip", "install", "--quiet", *REQUIREMENTS],
        check=True,
        timeout=900,
    )
    STAMP.write_text(wanted)


def peer_tool(env: dict[str, str], *args: str, timeout: float = 600) -> dict[str, Any]:
    out = subprocess.run(
        [str(PEER_PY), str(SITES / "tasks_tool.py"), *args],
        cwd=SITES,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"tasks_tool {' '.join(args)} failed:\n{out.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --- the backends ---------------------------------------------------------------------------------


Command = tuple[list[str], dict[str, str], Path]  # argv, environment, working directory


class Backend:
    """One backend: its database, how to empty it, enqueue, start its workers and count."""

    name = ""
    worker_shape = ""  # what "concurrency N" is for this backend

    def shape(self, concurrency: int) -> str:
        """The worker at ``concurrency``, in a few characters."""
        return f"1 proc, {concurrency} thr"

    def __init__(self, server_url: str, redis_url: str) -> None:
        self.server_url = server_url
        self.redis_url = redis_url
        self.db: Any = None  # bench/run.py's Database

    def setup(self, stack: contextlib.ExitStack) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def enqueue(self, count: int) -> dict[str, Any]:
        raise NotImplementedError

    def workers(self, concurrency: int) -> list[Command]:
        raise NotImplementedError

    def finished(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        """(succeeded, failed) so far."""
        raise NotImplementedError

    def count_rows(self, conn: psycopg.Connection[Any], query: str) -> tuple[int, int]:
        row = conn.execute(query.encode()).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


class Ours(Backend):
    name = "ours"
    worker_shape = "1 process, N threads"

    def setup(self, stack: contextlib.ExitStack) -> None:
        self.db = stack.enter_context(helpers().bench_database(self.server_url, keep=False))

    def reset(self) -> None:
        self.db.reset()  # TRUNCATE (promises cascade to tasks and jobs), VACUUM ANALYZE, CHECKPOINT

    def enqueue(self, count: int) -> dict[str, Any]:
        out: dict[str, Any] = helpers().djtool(self.db, "enqueue", "--count", str(count))
        self.db.sql("ANALYZE")  # as bench/run.py's drain_tasks does
        return out

    def workers(self, concurrency: int) -> list[Command]:
        run = helpers()
        options = json.dumps({"POLL_INTERVAL_MS": round(IDLE_POLL_S * 1000)})
        cmd = [run.PY, "manage.py", "resonate", "worker", "--concurrency", str(concurrency)]
        return [(cmd, run.env_for(self.db, DJANGO_TASKS_OPTIONS=options), ROOT)]

    def finished(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        return self.count_rows(
            conn,
            "SELECT count(*) FILTER (WHERE state = 'resolved'),"
            " count(*) FILTER (WHERE state NOT IN ('resolved', 'pending')) FROM promises_promise",
        )


class Peer(Backend):
    """A peer's Django site (bench/peers/sites/<site>) on a database of its own."""

    site = ""
    tables: tuple[str, ...] = ()

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DJANGO_SETTINGS_MODULE", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        }
        env.update(
            DATABASE_URL=self.db.url,
            DJANGO_SETTINGS_MODULE=f"{self.site}.settings",
            PYTHONPATH=str(SITES),
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONUNBUFFERED="1",
        )
        env.update(extra)
        return env

    def setup(self, stack: contextlib.ExitStack) -> None:
        run = helpers()
        self.db = run.Database(
            self.server_url, f"resonate_bench_{self.name}_{secrets.token_hex(4)}"
        )
        admin = f"{self.server_url.rstrip('/')}/postgres"
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{self.db.name}"'.encode())
        stack.callback(self.drop, admin)
        log(f"database {self.db.name}: migrating ({self.name})")
        subprocess.run(
            [str(PEER_PY), "-m", "django", "migrate", "--noinput", "-v0"],
            cwd=SITES,
            env=self.env(),
            check=True,
            timeout=300,
        )

    def drop(self, admin: str) -> None:
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.db.name}" WITH (FORCE)'.encode())
        log(f"dropped database {self.db.name}")

    def reset(self) -> None:
        self.db.sql(f"TRUNCATE {', '.join(self.tables)} CASCADE", "VACUUM ANALYZE", "CHECKPOINT")

    def enqueue(self, count: int) -> dict[str, Any]:
        out = peer_tool(self.env(), "enqueue", "--backend", self.name, "--count", str(count))
        self.db.sql("ANALYZE")
        return out

    def django(self, *args: str) -> list[str]:
        return [str(PEER_PY), "-m", "django", *args]


class Procrastinate(Peer):
    name = "procrastinate"
    site = "tasks_procrastinate"
    worker_shape = "1 process, N async slots (sync tasks in threads)"

    def shape(self, concurrency: int) -> str:
        return f"1 proc, {concurrency} slot" + "s" * (concurrency > 1)

    tables = (
        "procrastinate_jobs",
        "procrastinate_events",
        "procrastinate_periodic_defers",
        "procrastinate_workers",
    )

    def workers(self, concurrency: int) -> list[Command]:
        cmd = self.django(
            "procrastinate",
            "worker",
            "--concurrency",
            str(concurrency),
            "--fetch-job-polling-interval",
            str(IDLE_POLL_S),
        )
        return [(cmd, self.env(), SITES)]

    def finished(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        return self.count_rows(
            conn,
            "SELECT count(*) FILTER (WHERE status = 'succeeded'),"
            " count(*) FILTER (WHERE status IN ('failed', 'aborted', 'cancelled'))"
            " FROM procrastinate_jobs",
        )


class TasksDb(Peer):
    name = "tasksdb"
    site = "tasks_tasksdb"
    worker_shape = "N processes, 1 task at a time each (no concurrency option)"

    def shape(self, concurrency: int) -> str:
        return f"{concurrency} proc"

    tables = ("django_tasks_database_dbtaskresult",)

    def workers(self, concurrency: int) -> list[Command]:
        return [
            (
                self.django(
                    "db_worker",
                    "--interval",
                    str(IDLE_POLL_S),
                    "--no-startup-delay",
                    "--no-reload",
                    "--worker-id",
                    f"bench-{i}-{secrets.token_hex(4)}",
                    "-v",
                    "0",
                ),
                self.env(),
                SITES,
            )
            for i in range(concurrency)
        ]

    def finished(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        return self.count_rows(
            conn,
            "SELECT count(*) FILTER (WHERE status = 'SUCCESSFUL'),"
            " count(*) FILTER (WHERE status = 'FAILED') FROM django_tasks_database_dbtaskresult",
        )


class Celery(Peer):
    name = "celery"
    site = "tasks_celery"
    worker_shape = "1 parent + N prefork children"

    def shape(self, concurrency: int) -> str:
        return f"1+{concurrency} proc"

    def __init__(self, server_url: str, redis_url: str) -> None:
        super().__init__(server_url, redis_url)
        run_id = secrets.token_hex(4)
        self.queue = f"bench-tasks-{run_id}"
        self.counter = f"bench-tasks-{run_id}-done"
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=10)

    def env(self, **extra: str) -> dict[str, str]:
        return super().env(
            BENCH_REDIS_URL=self.redis_url,
            BENCH_QUEUE=self.queue,
            BENCH_COUNTER_KEY=self.counter,
            **extra,
        )

    def setup(self, stack: contextlib.ExitStack) -> None:
        self.redis.ping()
        stack.callback(self.forget)
        super().setup(stack)  # the site's database: created and migrated, then never used

    def forget(self) -> None:
        """Delete this run's keys: the queue, kombu's binding of it, the counter."""
        keys = [*self.redis.scan_iter(match=f"*{self.queue}*", count=1000)][:1000]
        if keys:
            self.redis.delete(*keys)
        self.redis.close()

    def reset(self) -> None:
        self.redis.delete(self.queue, self.counter)
        self.db.sql("VACUUM ANALYZE", "CHECKPOINT")  # what the others get before each run

    def enqueue(self, count: int) -> dict[str, Any]:
        return peer_tool(self.env(), "enqueue", "--backend", self.name, "--count", str(count))

    def workers(self, concurrency: int) -> list[Command]:
        cmd = [
            str(VENV / "bin" / "celery"),
            "-A",
            "tasks_celery.app",
            "worker",
            "--pool",
            "prefork",
            "--concurrency",
            str(concurrency),
            "--queues",
            self.queue,
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--hostname",
            f"{self.queue}@%h",
        ]
        return [(cmd, self.env(), SITES)]

    def finished(self, conn: psycopg.Connection[Any]) -> tuple[int, int]:
        done = self.redis.get(self.counter)
        return int(done) if isinstance(done, bytes | str | int) else 0, 0


KINDS: dict[str, type[Backend]] = {
    "ours": Ours,
    "procrastinate": Procrastinate,
    "tasksdb": TasksDb,
    "celery": Celery,
}


# --- one drain ------------------------------------------------------------------------------------


class PostgresCpu:
    """CPU seconds of the PostgreSQL processes serving one database since :meth:`sample` first
    ran: every postgres process (the server's own, WAL writer, checkpointer..., included) except
    the backends connected to other databases and the harness's own. Read again every
    ``SAMPLE_S``: a backend that exits keeps what it had used at the last reading; one that
    starts counts from zero."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.base: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.excluded: set[int] = set()
        self.started = False

    def sample(self) -> None:
        self.excluded |= {int(pid) for (pid,) in self.conn.execute(OTHER_BACKENDS.encode())}
        for pid, name, fields in helpers().proc_stats():
            if name == "postgres":
                ticks = int(fields[11]) + int(fields[12])
                if not self.started:
                    self.base[pid] = ticks
                self.last[pid] = ticks
        self.started = True

    def seconds(self) -> float:
        ticks = sum(
            max(0, t - self.base.get(pid, 0))
            for pid, t in self.last.items()
            if pid not in self.excluded
        )
        return ticks / CLOCK_TICKS


def worker_cpu(procs: list[subprocess.Popen[bytes]]) -> float:
    tree = helpers().tree_cpu_seconds
    return sum(float(tree(p.pid)) for p in procs)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each worker, then SIGKILL what is left of its process group (its own session)."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)  # its group: prefork children, a stuck worker
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(10)


def tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def drain(
    backend: Backend, concurrency: int, count: int, max_seconds: float, logs: Path
) -> dict[str, Any]:
    """Enqueue ``count`` no-ops, then drain them with the backend's worker at ``concurrency``."""
    backend.reset()
    enqueued = backend.enqueue(count)
    load = helpers().log_load(f"{backend.name}, concurrency {concurrency}")
    procs: list[subprocess.Popen[bytes]] = []
    log_path = logs / f"{backend.name}-c{concurrency}-{secrets.token_hex(3)}.log"
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(backend.db.connect())
        out = stack.enter_context(log_path.open("wb"))
        stack.callback(stop, procs)
        spawned = time.perf_counter()
        for argv, env, cwd in backend.workers(concurrency):
            procs.append(
                subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        pg = PostgresCpu(conn)
        first: tuple[float, int, float] | None = None  # when, how many done, worker CPU then
        sampled = harness = 0.0
        done = failed = 0
        while True:
            done, failed = backend.finished(conn)
            now = time.perf_counter()
            if failed:
                raise RuntimeError(f"{failed} tasks failed; worker log:\n{tail(log_path)}")
            if first is None and done > 0:
                first = (now, done, worker_cpu(procs))
                harness = time.process_time()
                pg.sample()
                sampled = now
            if done >= count:
                break
            if first is None and now - spawned > START_S:
                raise RuntimeError(f"no task finished in {START_S} s; log:\n{tail(log_path)}")
            if now - spawned > max_seconds:
                break
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a worker exited; its log:\n{tail(log_path)}")
            if first is not None and now - sampled >= SAMPLE_S:
                pg.sample()
                sampled = now
            time.sleep(POLL_S)
        ended = time.perf_counter()
        assert first is not None
        cpu = worker_cpu(procs) - first[2]
        pg.sample()
        harness = time.process_time() - harness
    at, done_first, _ = first
    tasks = done - done_first
    seconds = ended - at
    return {
        "backend": backend.name,
        "concurrency": concurrency,
        "worker": backend.shape(concurrency),
        "tasks": tasks,
        "done": done,
        "timed_out": done < count,
        "seconds": seconds,
        "per_s": tasks / seconds if seconds > 0 else 0.0,
        "startup_s": at - spawned,
        "worker_cpu_s_per_1000": cpu / max(tasks, 1) * 1000,
        "pg_cpu_s_per_1000": pg.seconds() / max(tasks, 1) * 1000,
        "harness_cpu_s": harness,  # this process's own polling over the window
        "enqueue_per_s": enqueued["per_s"],
        "load": load,
    }


# --- the run --------------------------------------------------------------------------------------

FIGURES = ("per_s", "worker_cpu_s_per_1000", "pg_cpu_s_per_1000", "startup_s", "enqueue_per_s")


def summarise(runs: list[dict[str, Any]], backends: list[str]) -> dict[str, Any]:
    spread = helpers().spread
    out: dict[str, Any] = {}
    for name in backends:
        mine = [r for r in runs if r["backend"] == name and "error" not in r]
        entry: dict[str, Any] = {
            "label": LABELS[name],
            "worker": KINDS[name].worker_shape,
            "errors": [r["error"] for r in runs if r["backend"] == name and "error" in r],
            "enqueue_per_s": spread([r["enqueue_per_s"] for r in mine]) if mine else None,
        }
        for c in CONCURRENCY:
            at = [r for r in mine if r["concurrency"] == c]
            entry[f"c{c}"] = (
                {
                    **{k: spread([r[k] for r in at]) for k in FIGURES if k != "enqueue_per_s"},
                    "worker": at[0]["worker"],
                    "loads": [r["load"] for r in at],
                    "timed_out": sum(r["timed_out"] for r in at),
                }
                if at
                else None
            )
        out[name] = entry
    ours = out.get("ours")
    for entry in out.values():
        ratios: dict[str, Any] = {}
        if ours is not None:
            if entry["enqueue_per_s"] and ours["enqueue_per_s"]:
                ratios["enqueue_per_s"] = (
                    entry["enqueue_per_s"]["median"] / ours["enqueue_per_s"]["median"]
                )
            for c in CONCURRENCY:
                a, b = entry[f"c{c}"], ours[f"c{c}"]
                if a and b:
                    ratios[f"c{c}"] = {
                        k: a[k]["median"] / b[k]["median"] if b[k]["median"] else None
                        for k in ("per_s", "worker_cpu_s_per_1000", "pg_cpu_s_per_1000")
                    }
        entry["ratio_to_ours"] = ratios
    return out


def run(
    pg_url: str,
    count: int,
    repeats: int,
    *,
    redis_url: str = "redis://127.0.0.1:6379/7",
    backends: tuple[str, ...] = BACKENDS,
    max_seconds: float = 300,
) -> dict[str, Any]:
    """The whole comparison: returns the runs, their summary and the table's rows."""
    loopback(pg_url)
    loopback(redis_url)
    started = time.perf_counter()
    peers_venv()
    names = [b for b in BACKENDS if b in backends]
    res: dict[str, Any] = {
        "count": count,
        "repeats": repeats,
        "machine": helpers().machine(),
        "peers": peer_tool({**os.environ, "DATABASE_URL": pg_url}, "versions"),
        "options": {
            "idle_poll_s": IDLE_POLL_S,
            "harness_poll_s": POLL_S,
            "celery": "prefork pool, Redis broker, no result backend, INCR counter in the task,"
            " gossip/mingle/heartbeat and remote control off, default prefetch and acks",
        },
    }
    log(f"peers: {res['peers']}")
    runs: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-peers-")))
        chosen = [KINDS[n](pg_url, redis_url) for n in names]
        for b in chosen:
            b.setup(stack)
        res["machine"]["postgresql"] = chosen[0].db.scalar("SHOW server_version")
        for i in range(repeats):
            for c in CONCURRENCY:
                for b in chosen:
                    try:
                        r = drain(b, c, count, max_seconds, logs)
                    except (RuntimeError, subprocess.SubprocessError, psycopg.Error) as exc:
                        log(f"{b.name} c{c} run {i + 1}: FAILED: {exc}")
                        runs.append({"backend": b.name, "concurrency": c, "error": str(exc)})
                        continue
                    runs.append(r)
                    log(
                        f"{b.name} c{c} run {i + 1}/{repeats}: {r['per_s']:.0f} tasks/s, "
                        f"worker {r['worker_cpu_s_per_1000']:.2f} + PostgreSQL "
                        f"{r['pg_cpu_s_per_1000']:.2f} CPU s/1000, "
                        f"enqueue {r['enqueue_per_s']:.0f}/s, start-up {r['startup_s']:.1f} s"
                        + (" (TIMED OUT)" if r["timed_out"] else "")
                    )
    res["runs"] = runs
    res["summary"] = summarise(runs, names)
    res["table"] = table(res["summary"])
    res["seconds"] = time.perf_counter() - started
    return res


# --- report ---------------------------------------------------------------------------------------


def ranged(r: dict[str, Any] | None, digits: int = 0) -> str:
    if not r:
        return "-"
    return f"{r['median']:,.{digits}f} ({r['min']:,.{digits}f}-{r['max']:,.{digits}f})"


def times(x: float | None) -> str:
    return "-" if x is None else f"x{x:.2f}"


HEADER = (
    "backend",
    "c",
    "worker",
    "tasks/s med (min-max)",
    "vs ours",
    "worker CPU s/1k",
    "vs ours",
    "PostgreSQL CPU s/1k",
    "vs ours",
    "start-up s",
    "load avg",
)


def table(summary: dict[str, Any]) -> list[list[str]]:
    rows = [list(HEADER)]
    for e in summary.values():
        for c in CONCURRENCY:
            f, ratio = e[f"c{c}"], e["ratio_to_ours"].get(f"c{c}", {})
            rows.append(
                [
                    e["label"],
                    str(c),
                    f["worker"] if f else "-",
                    ranged(f and f["per_s"]),
                    times(ratio.get("per_s")),
                    ranged(f and f["worker_cpu_s_per_1000"], 2),
                    times(ratio.get("worker_cpu_s_per_1000")),
                    ranged(f and f["pg_cpu_s_per_1000"], 2),
                    times(ratio.get("pg_cpu_s_per_1000")),
                    ranged(f and f["startup_s"], 1),
                    " ".join(f"{x:.2f}" for x in f["loads"]) if f else "-",
                ]
            )
    rows.append([])
    rows.append(["backend", "enqueue/s med (min-max)", "vs ours", "errors", "worker shape"])
    for e in summary.values():
        rows.append(
            [
                e["label"],
                ranged(e["enqueue_per_s"]),
                times(e["ratio_to_ours"].get("enqueue_per_s")),
                str(len(e["errors"])),
                e["worker"],
            ]
        )
    return rows


def print_table(rows: list[list[str]]) -> None:
    blocks: list[list[list[str]]] = [[]]
    for row in rows:
        if row:
            blocks[-1].append(row)
        else:
            blocks.append([])
    for block in blocks:
        widths = [max(len(r[i]) for r in block) for i in range(len(block[0]))]
        for n, row in enumerate(block):
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
            if n == 0:
                print("  ".join("-" * w for w in widths))
        print()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="count 500, one repeat")
    parser.add_argument(
        "--pg-url", default=os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432")
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("BENCH_PEERS_REDIS_URL", "redis://127.0.0.1:6379/7"),
        help="Celery's broker (this run's keys only are written, then deleted)",
    )
    parser.add_argument(
        "--backends", default=",".join(BACKENDS), help=f"comma-separated, of {BACKENDS}"
    )
    parser.add_argument("--max-seconds", type=float, default=300, help="per drain")
    parser.add_argument("--json", type=Path, default=RESULTS, help="where to write the results")
    args = parser.parse_args()
    chosen = tuple(b.strip() for b in args.backends.split(",") if b.strip())
    if unknown := set(chosen) - set(BACKENDS):
        raise SystemExit(f"unknown backends {sorted(unknown)}; choose from {BACKENDS}")
    count, repeats = (500, 1) if args.quick else (args.count, args.repeats)
    res = run(
        args.pg_url,
        count,
        repeats,
        redis_url=args.redis_url,
        backends=chosen,
        max_seconds=args.max_seconds,
    )
    print()
    print(f"{count} no-op tasks per run, median of {repeats} (min-max); ratios: peer / ours")
    print_table(res["table"])
    load = res["machine"]["loadavg_start"]
    print(f"total {res['seconds']:.0f} s; load average at start {load:.2f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(res, indent=2) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
