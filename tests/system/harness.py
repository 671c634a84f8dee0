"""Real processes for the delivery integration tests: databases, the web server, Celery, an SSE
client and an HTTP receiver. Nothing here is mocked; every wait polls a condition with a generous
deadline and never asserts on timing."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
CELERY = str(ROOT / ".venv" / "bin" / "celery")
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# The servers' (and the Outbox reader's) database; INTEGRATION_PG_URL puts a pooler between them
# and PostgreSQL (docs/how-to/production.md#pgbouncer: the suites through PgBouncer, with
# DATABASE_POOLER=transaction). Databases are created and dropped at PG_ADMIN_URL.
PG_DIRECT_URL = "postgresql://postgres@127.0.0.1:5432/{name}"  # never through a pooler
PG_URL = os.environ.get("INTEGRATION_PG_URL") or PG_DIRECT_URL
# Redis db 9 (one more per pytest-xdist worker, so parallel sessions keep separate queues).
_XDIST = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
REDIS_DB = min(9 + int(_XDIST[2:]) if _XDIST[2:].isdigit() else 9, 15)
REDIS_URL = f"redis://127.0.0.1:6379/{REDIS_DB}"
FAR = 10**13  # a deadline nobody reaches during the session
WAIT = 30.0  # seconds: how long any condition may take on a loaded machine

PUSH_TOKEN = f"it-token-{uuid.uuid4().hex}"
# The receivers listen on loopback, which push refuses unless allowed.
PUSH_POLICY = {"RESONATE_PUSH_ALLOWED": "127.0.0.1"}

# Small timings so the session runs quickly. The retry timeout outlives the session: a pending
# task is never offered again on its own, so every message a test sees was caused by the test.
TIMINGS = {
    "RESONATE_TICK_INTERVAL_MS": "200",
    "RESONATE_IN_FLIGHT_MS": "5000",
    "RESONATE_PUSH_TIMEOUT_MS": "2000",
    "RESONATE_PUSH_BACKOFF_BASE_MS": "100",
    "RESONATE_PUSH_BACKOFF_MAX_MS": "1000",
    "RESONATE_RETRY_TIMEOUT_MS": "600000",
    "RESONATE_SSE_KEEPALIVE_MS": "500",
    "RESONATE_POLL_FALLBACK_MS": "1000",
    # An SSE frame's row goes once its stream stayed open this long after the write (a stream
    # closed sooner gets it back): tests that wait for a row to go keep their stream open.
    "RESONATE_SSE_ACK_GRACE_MS": "1000",
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until[T](
    probe: Callable[[], T | None], what: str, timeout: float = WAIT, logs: Stack | None = None
) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            tail = logs.tails() if logs is not None else ""
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}")
        time.sleep(0.05)


# --- environment and processes ------------------------------------------------------------------


def base_env(database_url: str, broker_url: str | None, extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "CELERY_", "DJANGO_", "PYTEST_"))
        and k not in {"DATABASE_URL", "PORT", "HOST"}
    }
    env.update(TIMINGS)
    env.update(PUSH_POLICY)
    env.update(extra)
    env["DATABASE_URL"] = database_url
    env["DJANGO_SETTINGS_MODULE"] = "resonate_project.settings"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["LOG_LEVEL"] = "INFO"
    if broker_url is not None:
        env["CELERY_BROKER_URL"] = broker_url
    return env


def migrate(env: dict[str, str]) -> None:
    done = subprocess.run(
        [PYTHON, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"migrate failed:\n{done.stdout}\n{done.stderr}"


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def kill_hard(self) -> None:
        """SIGKILL the whole process group (a Celery worker and its pool children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(timeout=15)
        # Whatever is left of the group (pool children, a stuck server) goes now.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=15)


def spawn(name: str, argv: list[str], env: dict[str, str], logdir: Path) -> Proc:
    log = logdir / f"{name}-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Proc(name, popen, log)


# --- databases ----------------------------------------------------------------------------------


def create_pg_database() -> str:
    name = f"resonate_it_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_pg_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def flush_redis() -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        client.flushdb()
    finally:
        client.close()


class Outbox:
    """Reads the outbox table directly (the source of truth) without Django."""

    def __init__(self, pg_name: str | None = None, sqlite_path: Path | None = None) -> None:
        self.pg_name = pg_name
        self.sqlite_path = sqlite_path

    def rows(self, where: str = "", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
        sql = "SELECT key, kind, address, attempts, revision FROM outbox_message"
        cols = ("key", "kind", "address", "attempts", "revision")
        if self.pg_name is not None:
            with psycopg.connect(PG_URL.format(name=self.pg_name), autocommit=True) as conn:
                found = conn.execute(sql + where.replace("?", "%s"), params).fetchall()
        else:
            assert self.sqlite_path is not None
            lite = sqlite3.connect(self.sqlite_path, timeout=30)
            try:
                found = lite.execute(sql + where, params).fetchall()
            finally:
                lite.close()
        return [dict(zip(cols, row, strict=True)) for row in found]

    def keyed(self, key: str) -> list[dict[str, Any]]:
        return self.rows(" WHERE key = ?", (key,))


# --- the server under test ----------------------------------------------------------------------


@dataclass
class Stack:
    """One running server shape: its processes, its URL and its outbox."""

    shape: str
    base_url: str
    env: dict[str, str]
    logdir: Path
    outbox: Outbox
    procs: dict[str, Proc] = field(default_factory=dict)
    token: str | None = None  # sent as Authorization: Bearer when the server requires auth

    def tails(self) -> str:
        parts = []
        for proc in self.procs.values():
            state = "running" if proc.alive() else f"exited {proc.popen.returncode}"
            parts.append(f"--- {proc.name} ({state}) {proc.log}\n{proc.tail()}")
        return "\n".join(parts)

    def call(self, kind: str, **data: Any) -> tuple[int, Any]:
        """POST one envelope to ``/``; returns (status, data)."""
        body = {"kind": kind, "head": {"corrId": unique("c")}, "data": data}
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        res = httpx.post(self.base_url + "/", json=body, headers=headers, timeout=60)
        reply = res.json()
        assert reply["head"]["status"] == res.status_code, reply
        return res.status_code, reply["data"]

    def ok(self, kind: str, **data: Any) -> dict[str, Any]:
        status, reply = self.call(kind, **data)
        assert status == 200, f"{kind} answered {status}: {reply}"
        assert isinstance(reply, dict)
        return reply

    def stream(self, group: str, stream_id: str) -> SseStream:
        s = SseStream(f"{self.base_url}/poll/{group}/{stream_id}")
        wait_until(lambda: s.connected.is_set() or s.ended.is_set(), f"SSE {s.url}", logs=self)
        assert s.connected.is_set(), f"SSE {s.url} ended before connecting: {s.error}"
        return s

    def wait_ready(self) -> None:
        web = self.procs["web"]

        def ready() -> bool:
            assert web.alive(), f"the web process exited\n{self.tails()}"
            try:
                return httpx.get(self.base_url + "/ready", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, "/ready", timeout=90, logs=self)

    def start_web(self, *args: str) -> None:
        port = int(self.base_url.rsplit(":", 1)[1])
        argv = [PYTHON, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port), *args]
        self.procs["web"] = spawn("web", argv, self.env, self.logdir)
        self.wait_ready()

    def start_worker(self) -> Proc:
        argv = [CELERY, "-A", "resonate_project", "worker", "-l", "info"]
        argv += ["-n", f"{unique('it')}@%h"]
        proc = spawn("worker", argv, self.env, self.logdir)
        self.procs["worker"] = proc
        wait_until(
            lambda: (" ready." in proc.tail(400)) or not proc.alive(), "the worker", logs=self
        )
        assert proc.alive(), f"the worker exited\n{self.tails()}"
        return proc

    def start_beat(self) -> None:
        argv = [CELERY, "-A", "resonate_project", "beat", "-l", "info"]
        argv += ["--pidfile", str(self.logdir / "beat.pid")]
        argv += ["--schedule", str(self.logdir / "beat-schedule")]
        self.procs["beat"] = spawn("beat", argv, self.env, self.logdir)

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            proc.stop()


# --- an SSE client ------------------------------------------------------------------------------


class SseStream:
    """``GET /poll/{group}/{id}`` read in a thread; every ``data:`` frame is parsed and kept."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.frames: list[dict[str, Any]] = []
        self.comments: list[str] = []
        self.error: BaseException | None = None
        self.content_type = ""
        self.connected = threading.Event()
        self.ended = threading.Event()
        self._closing = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"sse {url}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with (
                httpx.Client(timeout=None) as client,
                client.stream("GET", self.url, timeout=None) as res,
            ):
                if res.status_code != 200:
                    raise AssertionError(f"GET {self.url} answered {res.status_code}")
                self.content_type = res.headers.get("content-type", "")
                for line in res.iter_lines():
                    if self._closing.is_set():
                        return
                    if line.startswith(":"):
                        self.comments.append(line)
                        self.connected.set()
                    elif line.startswith("data:"):
                        frame = json.loads(line[len("data:") :].strip())
                        with self._cond:
                            self.frames.append(frame)
                            self._cond.notify_all()
        except BaseException as exc:
            if not self._closing.is_set():
                self.error = exc
        finally:
            self.ended.set()

    def wait_for(
        self, match: Callable[[dict[str, Any]], bool], what: str, timeout: float = WAIT
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for frame in self.frames:
                    if match(frame):
                        return frame
                left = deadline - time.monotonic()
                if left <= 0 or self.ended.is_set():
                    raise AssertionError(
                        f"{self.url}: no frame {what} within {timeout:.0f}s "
                        f"(error={self.error!r}); frames: {self.frames}"
                    )
                self._cond.wait(min(left, 0.5))

    def close(self) -> None:
        """Hang up (the reader leaves at the next line; keepalives arrive every 500 ms)."""
        self._closing.set()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def streams(stack: Stack, *specs: tuple[str, str]) -> Iterator[list[SseStream]]:
    opened: list[SseStream] = []
    try:
        for group, stream_id in specs:
            opened.append(stack.stream(group, stream_id))
        yield opened
    finally:
        for s in opened:
            s.close()


def execute(task_id: str, version: int) -> dict[str, Any]:
    return {"kind": "execute", "head": {}, "data": {"task": {"id": task_id, "version": version}}}


def unblock(record: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "unblock", "head": {}, "data": {"promise": record}}


# --- an HTTP receiver for push ------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """A local HTTP endpoint that records every POST (on arrival). It can answer 500 to the first
    ``fail_first`` requests and sleep ``delay`` seconds before answering the others."""

    def __init__(self, fail_first: int = 0, delay: float = 0.0) -> None:
        self.fail_first = fail_first
        self.delay = delay
        self.received: list[Received] = []
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with outer._cond:
                    index = len(outer.received)
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    outer.received.append(Received(self.path, headers, body))
                    outer._cond.notify_all()
                if index < outer.fail_first:
                    self._answer(500, b'{"error":"failing on purpose"}')
                    return
                if outer.delay:
                    time.sleep(outer.delay)
                self._answer(200, b"{}")

            def _answer(self, status: int, body: bytes) -> None:
                with contextlib.suppress(OSError):
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a pusher that died mid-request is part of the test

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        )
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def snapshot(self) -> list[Received]:
        with self._cond:
            return list(self.received)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
