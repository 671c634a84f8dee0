"""The production shape on private services, and the faults injected into it.

PostgreSQL is a cluster of our own (``initdb`` into a temporary directory, run as ``postgres`` when
we are root) and Redis a server of our own, each on a free loopback port: restarting them never
disturbs the machine's shared services. The server processes are started as
docs/how-to/production.md#processes says (``serve --no-embedded``,
``celery -A resonate_project worker``, ``celery -A resonate_project beat``), with the environment
of its settings table.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
CELERY = str(ROOT / ".venv" / "bin" / "celery")
PG_BIN = Path(os.environ.get("CHAOS_PG_BIN", "/usr/lib/postgresql/15/bin"))
SDK_PROGRAM = Path(__file__).resolve().parent / "sdk_worker.py"

# Production defaults except where a default would make one run take hours: leases, grace and
# backoff ceilings measured in tens of seconds are shortened so that a fault's consequences play
# out within a scenario (docs/explanation/reliability.md lists them).
TIMINGS = {
    "RESONATE_TICK_INTERVAL_MS": "500",
    "RESONATE_IN_FLIGHT_MS": "5000",
    "RESONATE_SSE_ACK_GRACE_MS": "2000",
    "RESONATE_SSE_KEEPALIVE_MS": "1000",
    "RESONATE_PUSH_TIMEOUT_MS": "2000",
    "RESONATE_PUSH_BACKOFF_BASE_MS": "200",
    "RESONATE_PUSH_BACKOFF_MAX_MS": "3000",
    "RESONATE_PUSH_MAX_ATTEMPTS": "1000",
}
# The SDK workers' lease (the SDK's default is 60 s): a SIGKILLed worker's task is offered again
# after it. 5 s thrashed on a loaded machine (leases lapsed between heartbeats).
SDK_TTL_MS = 20_000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(probe: Any, what: str, timeout: float, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class Missing(Exception):
    """Something the chaos run needs is not on this machine (the message says what)."""


@dataclass
class Proc:
    name: str
    argv: list[str]
    env: dict[str, str]
    logdir: Path
    popen: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    starts: int = 0

    def start(self) -> None:
        self.starts += 1
        self.log = self.logdir / f"{self.name}.{self.starts}.log"
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def logs(self) -> list[Path]:
        return sorted(self.logdir.glob(f"{self.name}.*.log"))

    def text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self.logs())

    def tail(self, lines: int = 30) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        """SIGKILL the process and its group (a Celery worker's pool children too)."""
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.popen is None:
            return
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=10)
        self.kill()


def _as_postgres(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run its tools as ``postgres`` when we are root."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *argv]
    return argv


class Postgres:
    """A private cluster: ``initdb`` once, then start, stop (fast or immediate) and start again."""

    def __init__(self, workdir: Path) -> None:
        for tool in ("initdb", "pg_ctl"):
            if not (PG_BIN / tool).exists():
                raise Missing(f"{PG_BIN / tool} not found (set CHAOS_PG_BIN)")
        self.data = workdir / "pg"
        self.port = free_port()
        self.data.mkdir()
        if os.geteuid() == 0:
            shutil.chown(self.data, "postgres", "postgres")
        self._run([str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres"])

    def _run(self, argv: list[str], timeout: float = 120, within: list[str] | None = None) -> None:
        done = subprocess.run(
            [*(within or []), *_as_postgres(argv)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")

    host = "127.0.0.1"  # the address it listens on

    def within(self) -> list[str]:
        """The command prefix that runs ``pg_ctl start`` where the cluster lives (its host)."""
        return []

    def url(self, db: str = "postgres") -> str:
        return f"postgresql://postgres@{self.host}:{self.port}/{db}"

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.data} -c listen_addresses={self.host} "
            "-c max_connections=200 -c shared_buffers=64MB"
        )
        argv = [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.data / "log")]
        self._run([*argv, "-w", "-t", "60", "-o", options, "start"], within=self.within())

    def stop(self, mode: str = "fast") -> None:
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", "-m", mode, "stop"])

    def running(self) -> bool:
        try:
            psycopg.connect(self.url(), connect_timeout=2).close()
        except psycopg.Error:
            return False
        return True

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")


class Redis:
    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise Missing("redis-server not found on PATH")
        self.port = free_port()
        argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        argv += ["--appendonly", "no", "--dir", str(workdir)]
        self.proc = Proc("redis", argv, dict(os.environ), workdir)

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.proc.start()

        def up() -> bool:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as s,
            ):
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
            return False

        wait_for(up, "redis-server", 30)


@dataclass
class Shape:
    """Two web processes, two Celery workers, one beat, and SDK workers in two groups."""

    workdir: Path
    pg: Postgres
    redis: Redis
    sdk_python: Path
    webs: list[Proc] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    workers: list[Proc] = field(default_factory=list)
    beat: Proc | None = None
    sdks: list[Proc] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    token: str = ""  # a service credential every client sends

    def all(self) -> list[Proc]:
        procs = [*self.webs, *self.workers, *self.sdks]
        return procs + ([self.beat] if self.beat is not None else [])

    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]


def server_env(database_url: str, broker_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "CELERY_", "DJANGO_", "PYTEST_", "OTEL_"))
        and k not in {"DATABASE_URL", "PORT", "HOST", "LOG_FORMAT", "PROMETHEUS_MULTIPROC_DIR"}
    }
    env.update(TIMINGS)
    env.update(
        {
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": broker_url,
            "DJANGO_SETTINGS_MODULE": "resonate_project.settings",
            # docs/how-to/production.md#deployment: auth required (a service credential, created
            # after migrate).
            "RESONATE_AUTH": "required",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            # The push receivers listen on loopback, which push refuses unless allowed.
            "RESONATE_PUSH_ALLOWED": "127.0.0.1",
            # One JSON line per request, with its status: the run counts the 500s in them.
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
    )
    return env


AUDIT_SQL = """
CREATE TABLE chaos_task_audit (
    seq bigserial PRIMARY KEY, id text NOT NULL, old_state text, new_state text,
    old_version int, new_version int, old_pid text, new_pid text,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION chaos_task_audit() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO chaos_task_audit (id, new_state, new_version, new_pid)
    VALUES (NEW.id, NEW.state, NEW.version, NEW.pid);
  ELSIF NEW.state IS DISTINCT FROM OLD.state OR NEW.version IS DISTINCT FROM OLD.version
        OR NEW.pid IS DISTINCT FROM OLD.pid THEN
    INSERT INTO chaos_task_audit
      (id, old_state, new_state, old_version, new_version, old_pid, new_pid)
    VALUES (NEW.id, OLD.state, NEW.state, OLD.version, NEW.version, OLD.pid, NEW.pid);
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER chaos_task_audit AFTER INSERT OR UPDATE ON tasks_app_task
  FOR EACH ROW EXECUTE FUNCTION chaos_task_audit();

CREATE TABLE chaos_promise_change (
    seq bigserial PRIMARY KEY, id text NOT NULL, op text NOT NULL, old_state text,
    new_state text, old_value text, new_value text,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION chaos_promise_change() RETURNS trigger AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    INSERT INTO chaos_promise_change (id, op, old_state) VALUES (OLD.id, 'delete', OLD.state);
    RETURN OLD;
  END IF;
  IF OLD.state <> 'pending' AND (NEW.state IS DISTINCT FROM OLD.state
      OR NEW.value_data IS DISTINCT FROM OLD.value_data
      OR NEW.value_headers IS DISTINCT FROM OLD.value_headers) THEN
    INSERT INTO chaos_promise_change (id, op, old_state, new_state, old_value, new_value)
    VALUES (NEW.id, 'update', OLD.state, NEW.state, OLD.value_data, NEW.value_data);
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER chaos_promise_change AFTER UPDATE OR DELETE ON promises_promise
  FOR EACH ROW EXECUTE FUNCTION chaos_promise_change();
"""


class Cluster:
    """Everything of one run, under one temporary directory removed by :meth:`close`."""

    def __init__(self, sdk_python: Path, sdk_workers_per_group: int = 2) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="resonate-chaos-"))
        self.workdir.chmod(0o755)  # the postgres user reaches its data directory through it
        self.logdir = self.workdir / "logs"
        self.logdir.mkdir()
        self.sdk_python = sdk_python
        self.per_group = sdk_workers_per_group
        self.pg: Postgres | None = None
        self.redis: Redis | None = None
        self.shape: Shape | None = None
        self.db = "resonate"

    # --- start --------------------------------------------------------------------------------

    def start(self) -> Shape:
        log(f"workdir {self.workdir}")
        self.pg = self.start_postgres()
        self.redis = Redis(self.workdir)
        self.redis.start()
        log(f"PostgreSQL on {self.pg.port}, Redis on {self.redis.port} (private)")
        with psycopg.connect(self.pg.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.db}"')
        env = self.server_environment()
        done = subprocess.run(
            [PYTHON, "manage.py", "migrate", "--noinput"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"migrate failed:\n{done.stdout}\n{done.stderr}")
        with psycopg.connect(self.pg.url(self.db), autocommit=True) as conn:
            conn.execute(AUDIT_SQL)
        done = subprocess.run(
            [PYTHON, "manage.py", "resonate", "credentials", "create", "chaos"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"credentials create failed:\n{done.stdout}\n{done.stderr}")
        token = done.stdout.splitlines()[-1].strip()
        shape = Shape(self.workdir, self.pg, self.redis, self.sdk_python, env=env, token=token)
        self.shape = shape
        shape.ports = [free_port(), free_port()]
        for i, port in enumerate(shape.ports, 1):
            argv = [PYTHON, "manage.py", "serve", "--no-embedded", "--host", "127.0.0.1"]
            shape.webs.append(Proc(f"web{i}", [*argv, "--port", str(port)], env, self.logdir))
        for i in (1, 2):
            argv = [CELERY, "-A", "resonate_project", "worker", "-l", "info"]
            argv += ["-n", f"chaos-w{i}-{uuid.uuid4().hex[:6]}@%h"]
            shape.workers.append(Proc(f"worker{i}", argv, env, self.logdir))
        argv = [CELERY, "-A", "resonate_project", "beat", "-l", "info"]
        argv += ["--pidfile", str(self.workdir / "beat.pid")]
        argv += ["--schedule", str(self.workdir / "beat-schedule")]
        shape.beat = Proc("beat", argv, env, self.logdir)
        for web in shape.webs:
            web.start()
        for i in range(len(shape.webs)):
            self.wait_web(i)
        for worker in shape.workers:
            worker.start()
        for worker in shape.workers:
            self.wait_worker(worker)
        shape.beat.start()
        # SDK workers: group chaos-a runs the workflows, chaos-b answers their rpc. They are
        # spread over both web ports, as behind a load balancer.
        for group in ("chaos-a", "chaos-b"):
            for i in range(self.per_group):
                pid = f"{group[-1]}{i + 1}"
                url = shape.urls()[i % len(shape.urls())]
                cfg = {"group": group, "pid": pid, "ttl_ms": SDK_TTL_MS}
                sdk_env = sdk_environment(url, token)
                argv = [str(self.sdk_python), str(SDK_PROGRAM), json.dumps(cfg)]
                shape.sdks.append(Proc(f"sdk-{pid}", argv, sdk_env, self.logdir))
        for sdk in shape.sdks:
            sdk.start()
        for sdk in shape.sdks:
            self.wait_sdk(sdk)
        log("production shape up: 2 web, 2 Celery workers, beat, 2+2 SDK workers")
        return shape

    def start_postgres(self) -> Postgres:
        """The run's cluster, started (bench/chaos/failover.py: a primary with a standby)."""
        pg = Postgres(self.workdir)
        pg.start()
        return pg

    def server_environment(self) -> dict[str, str]:
        """The server processes' environment (bench/chaos/pooler.py and failover.py put a pooler
        or a second host in their ``DATABASE_URL``)."""
        assert self.pg is not None
        assert self.redis is not None
        return server_env(self.pg.url(self.db), self.redis.url())

    def wait_web(self, i: int, timeout: float = 90) -> None:
        assert self.shape is not None
        web, url = self.shape.webs[i], self.shape.urls()[i]

        def ready() -> bool:
            if not web.alive():
                raise RuntimeError(f"{web.name} exited:\n{web.tail()}")
            try:
                return httpx.get(url + "/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, f"{web.name} /ready", timeout, 0.1)

    def wait_worker(self, worker: Proc, timeout: float = 90) -> None:
        def ready() -> bool:
            if not worker.alive():
                raise RuntimeError(f"{worker.name} exited:\n{worker.tail()}")
            return " ready." in worker.tail(400)

        wait_for(ready, f"{worker.name} ready", timeout, 0.1)

    def wait_sdk(self, sdk: Proc, timeout: float = 60) -> None:
        def ready() -> bool:
            if not sdk.alive():
                raise RuntimeError(f"{sdk.name} exited:\n{sdk.tail()}")
            return "READY" in sdk.tail(400)

        wait_for(ready, f"{sdk.name} ready", timeout, 0.1)

    # --- faults -------------------------------------------------------------------------------

    def pg_restart(self, mode: str, down_s: float = 0.0) -> None:
        assert self.pg is not None
        self.pg.stop(mode)
        if down_s:
            time.sleep(down_s)
        self.pg.start()

    def redis_restart(self, down_s: float = 1.0) -> None:
        assert self.redis is not None
        self.redis.proc.kill()
        time.sleep(down_s)
        self.redis.start()

    def restart(self, proc: Proc, down_s: float = 1.0) -> None:
        """SIGKILL ``proc``, and start it again ``down_s`` later (as an orchestrator would)."""
        assert self.shape is not None
        proc.kill()
        time.sleep(down_s)
        proc.start()
        if proc in self.shape.webs:
            self.wait_web(self.shape.webs.index(proc))
        elif proc in self.shape.workers:
            self.wait_worker(proc)
        elif proc in self.shape.sdks:
            self.wait_sdk(proc)

    # --- the end ------------------------------------------------------------------------------

    def close(self, keep: bool = False) -> None:
        if self.shape is not None:
            for proc in reversed(self.shape.all()):
                proc.stop()
        if self.redis is not None:
            self.redis.proc.stop()
        if self.pg is not None:
            self.pg.shutdown()
        if keep:
            log(f"kept {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


def sdk_environment(url: str, token: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "DJANGO_", "PYTEST_", "CELERY_", "VIRTUAL_ENV"))
        and k not in {"DATABASE_URL", "PYTHONPATH"}
    }
    env.update({"RESONATE_URL": url, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
    env["RESONATE_TOKEN"] = token  # resonate-sdk sends it on POST / and on its stream
    return env


def sdk_python() -> Path:
    """The ``.e2e/py`` virtualenv with ``resonate-sdk`` (set up by the end-to-end suite's tools)."""
    sys.path.insert(0, str(ROOT))
    from tests.e2e import tools

    try:
        return tools.python_sdk().python
    except tools.Missing as exc:
        raise Missing(f"Python SDK: {exc}") from exc
