"""The production guide (docs/how-to/production.md) and the observability guide's commands, run as
an operator runs them, line by line in one shell each:

* the install block, in a fresh copy of the checkout: a virtualenv, the ``[server]`` extra with
  that interpreter's own pip, and a clean ``check`` under it;
* the processes block on PostgreSQL and Redis: ``createdb``, ``migrate``, the web process, a
  Celery worker and beat, with auth required; a timer then fires (only beat's ticks, run by the
  worker, resolve it) and ``/ready`` answers;
* the observability guide's multiprocess lines empty the metrics directory, and its tracing
  line exports spans to an OTLP endpoint.

What differs from the pages, and only that: hosts (db.internal, redis.internal, otel-collector)
are 127.0.0.1, the database name is the test's own, ports are free ones, the secret is generated,
and 0.0.0.0 is 127.0.0.1 (traffic stays on loopback).
"""

from __future__ import annotations

import http.server
import os
import shlex
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.docs_blocks import ROOT, block

from .conftest import require_services
from .harness import PG_ADMIN_URL, REDIS_URL, drop_pg_database, free_port, wait_until

pytestmark = pytest.mark.integration

PRODUCTION = "docs/how-to/production.md"
OBSERVABILITY = "docs/how-to/observability.md"
VENV_BIN = ROOT / ".venv" / "bin"


def reader_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "DJANGO_", "PYTEST_", "CELERY_", "OTEL_", "VIRTUAL_ENV"))
        and k not in {"DATABASE_URL", "HOST", "PORT", "PROMETHEUS_MULTIPROC_DIR"}
    }
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env['PATH']}"  # as after `source .venv/bin/activate`
    env["PYTHONUNBUFFERED"] = "1"
    return {**env, **extra}


def shell(line: str, env: dict[str, str], cwd: Path = ROOT, timeout: float = 300) -> str:
    done = subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


class Background:
    """Documented lines that run until stopped, each in its own process group and log."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, line: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = self.logdir / f"background-{len(self.procs)}.log"
        proc = subprocess.Popen(
            ["bash", "-c", line],
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((proc, log))
        return proc

    def tails(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for _, log in self.procs)

    def stop(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
        for proc, _ in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(10)


@pytest.fixture
def background(tmp_path: Path) -> Iterator[Background]:
    procs = Background(tmp_path)
    try:
        yield procs
    finally:
        procs.stop()


def on_loopback(line: str, port: int) -> str:
    return line.replace("--host 0.0.0.0", "--host 127.0.0.1").replace(
        "--port 8001", f"--port {port}"
    )


def test_the_install_block_installs_the_server(tmp_path: Path) -> None:
    require_services()
    from tests.e2e import tools

    try:
        python = tools.find_python()
    except tools.Missing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / "python3.12").symlink_to(python)
    checkout = tmp_path / "checkout"
    skip = (".*", "build", "*.egg-info", "node_modules", "__pycache__", "*.sqlite3*", "var", "docs")
    shutil.copytree(ROOT, checkout, ignore=shutil.ignore_patterns(*skip))
    env = reader_env(PATH=f"{shims}{os.pathsep}{os.environ['PATH']}")  # the project's venv unused
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'check.sqlite3'}"
    lines = block(PRODUCTION, "production-install").text
    out = shell(lines + "\npython manage.py check\n", env, cwd=checkout, timeout=900)
    assert "no issues" in out
    assert (checkout / ".venv/bin/uvicorn").exists()
    assert (checkout / ".venv/bin/celery").exists()


def test_the_processes_block_runs_the_production_shape(
    tmp_path: Path, background: Background
) -> None:
    require_services()
    lines = block(PRODUCTION, "production-processes").lines()
    exports = [line for line in lines if line.startswith("export ")]
    createdb, migrate_, serve, worker, beat = [c for c in lines if not c.startswith("export ")]
    assert createdb.startswith("createdb -h db.internal -U resonate resonate"), createdb
    assert migrate_ == "python manage.py migrate"
    assert worker == "celery -A resonate_project worker -l info"
    assert beat == "celery -A resonate_project beat -l info"

    name = f"resonate_docs_{uuid.uuid4().hex[:10]}"
    port = free_port()
    env = reader_env()
    for line in exports:
        for word in shlex.split(line)[1:]:
            key, _, value = word.partition("=")
            env[key] = value
    assert env["RESONATE_AUTH"] == "required"
    assert env["DJANGO_SECRET_KEY"] == "..."  # the reader's own
    env["DJANGO_SECRET_KEY"] = uuid.uuid4().hex * 2
    assert env["DATABASE_URL"] == "postgresql://resonate@db.internal/resonate"
    env["DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:5432/{name}"
    assert env["CELERY_BROKER_URL"].startswith("redis://redis.internal:6379/")
    env["CELERY_BROKER_URL"] = REDIS_URL
    host = PG_ADMIN_URL.split("@", 1)[1].split(":", 1)[0]
    try:
        shell(
            createdb.replace(
                "-h db.internal -U resonate resonate", f"-h {host} -U postgres {name}"
            ),
            env,
        )
        shell(migrate_, env)
        web = background.start(on_loopback(serve, port), env)
        background.start(worker, env)
        background.start(beat + f" --schedule {tmp_path / 'beat-schedule'}", env)
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert web.poll() is None, background.tails()
            try:
                return httpx.get(base + "/ready", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, "/ready", timeout=90)
        token = shell("python manage.py resonate credentials create docs --admin", env)
        auth = {"Authorization": f"Bearer {token.splitlines()[-1]}"}
        timer = f"docs-timer-{uuid.uuid4().hex[:8]}"
        now = int(time.time() * 1000)
        body = {
            "kind": "promise.create",
            "head": {"corrId": "docs"},
            "data": {
                "id": timer,
                "timeoutAt": now + 1500,
                "param": {},
                "tags": {"resonate:timer": "true"},
            },
        }
        res = httpx.post(base + "/", json=body, headers=auth, timeout=30)
        assert res.status_code == 200, res.text

        def resolved() -> bool:
            got = httpx.post(
                base + "/",
                json={"kind": "promise.get", "head": {"corrId": "d"}, "data": {"id": timer}},
                headers=auth,
                timeout=30,
            ).json()
            return bool(got["data"]["promise"]["state"] == "resolved")

        # With a broker set the web process runs no steps: beat's ticks, run by the worker, do.
        wait_until(resolved, "the timer, fired by beat and the worker", timeout=60)
        worker_log = background.procs[1][1].read_text()
        assert "resonate.tick" in worker_log, background.tails()
    finally:
        background.stop()
        drop_pg_database(name)


def test_the_multiprocess_lines_empty_the_metrics_directory(tmp_path: Path) -> None:
    lines = block(OBSERVABILITY, "observability-multiprocess").lines()
    export, reset, serve, worker = lines
    assert export == "export PROMETHEUS_MULTIPROC_DIR=/run/resonate/metrics"
    assert "--workers" in serve.split()
    assert worker == "celery -A resonate_project worker -l info"
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "counter_123.db").write_bytes(b"stale")
    script = "\n".join(
        [
            export.replace("/run/resonate/metrics", str(directory)),
            reset,
            'ls -A "$PROMETHEUS_MULTIPROC_DIR"',
        ]
    )
    assert shell(script, reader_env()) == ""  # there, and empty, before any process starts
    assert directory.is_dir()


class Collector(http.server.BaseHTTPRequestHandler):
    posts: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Collector.posts.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_tracing_line_exports_spans(tmp_path: Path, background: Background) -> None:
    text = block(OBSERVABILITY, "observability-tracing").text.replace("\\\n", " ")
    assert "http://otel-collector:4318" in text
    collector = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=collector.serve_forever, daemon=True).start()
    Collector.posts.clear()
    port = free_port()
    line = on_loopback(text.strip(), port).replace(
        "http://otel-collector:4318", f"http://127.0.0.1:{collector.server_address[1]}"
    )
    env = reader_env(
        DATABASE_URL=f"sqlite:///{tmp_path / 'traces.sqlite3'}",
        OTEL_BSP_SCHEDULE_DELAY="200",  # the exporter's batch delay, 5 s by default
    )
    try:
        shell("python manage.py migrate --noinput -v 0", env)
        web = background.start(line, env)
        base = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert web.poll() is None, background.tails()
            try:
                return httpx.get(base + "/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(up, "serve", timeout=90)
        body = {"kind": "promise.get", "head": {"corrId": "t"}, "data": {"id": "nothing"}}
        for _ in range(100):  # the sampler keeps one trace in ten
            httpx.post(base + "/", json=body, timeout=30)
        wait_until(
            lambda: "/v1/traces" in Collector.posts, "spans at the OTLP endpoint", timeout=30
        )
    finally:
        background.stop()
        collector.shutdown()


def test_the_backup_lines_restore_a_promise_into_a_new_database(tmp_path: Path) -> None:
    require_services()
    dump, createdb, restore = block(PRODUCTION, "production-backup").lines()
    source = f"resonate_docs_{uuid.uuid4().hex[:10]}"
    restored = f"{source}_restored"
    host = PG_ADMIN_URL.split("@", 1)[1].split(":", 1)[0]

    def ours(line: str) -> str:
        line = line.replace(
            "postgresql://resonate@db.internal/resonate_restored",
            f"postgresql://postgres@{host}:5432/{restored}",
        )
        line = line.replace(
            "postgresql://resonate@db.internal/resonate",
            f"postgresql://postgres@{host}:5432/{source}",
        )
        return line.replace(
            "-h db.internal -U resonate resonate_restored", f"-h {host} -U postgres {restored}"
        )

    env = reader_env(DATABASE_URL=f"postgresql://postgres@{host}:5432/{source}")
    try:
        shell(f"createdb -h {host} -U postgres {source}", env)
        shell("python manage.py migrate --noinput -v 0", env)
        shell("python manage.py resonate promises create kept --timeout 1h --data before", env)
        for line in (dump, createdb, restore):
            assert "db.internal" not in ours(line), line
            shell(ours(line), env, cwd=tmp_path)
        env["DATABASE_URL"] = f"postgresql://postgres@{host}:5432/{restored}"
        shown = shell("python manage.py resonate promises get kept", env)
        assert "pending" in shown, shown
        assert "before" in shown, shown
    finally:
        drop_pg_database(restored)
        drop_pg_database(source)
