"""Django's Tasks framework with real ``manage.py resonate worker`` processes, on SQLite and on
PostgreSQL. Calls are enqueued and read back through Django's own API by a driver process
(``tasks_driver.py``); workers are started, SIGKILLed and SIGTERMed for real. No Redis: the
worker claims from the database, and no Celery or web process is needed (but for the SDK test).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.e2e.tools import Missing, python_sdk
from tests.support.docs_blocks import block

from .harness import (
    PG_URL,
    PYTHON,
    ROOT,
    Proc,
    base_env,
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate,
    spawn,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

# A short lease so a SIGKILLed worker's call is taken back within seconds; quick polls and
# retries so the suite is short.
OPTIONS = {
    "LEASE_MS": 2_000,
    "POLL_INTERVAL_MS": 100,
    "MAX_ATTEMPTS": 3,
    "RETRY_BACKOFF_MS": 200,
}
SDK_PROGRAM = ROOT / "tests" / "e2e" / "programs" / "py_django_task.py"


@dataclass
class Database:
    env: dict[str, str]
    logdir: Path


def pg_reachable() -> None:
    try:
        psycopg.connect(PG_URL.format(name="postgres"), connect_timeout=5).close()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL unreachable under CI=true: {exc}")
        pytest.skip(f"PostgreSQL unreachable: {exc}")


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path_factory: Any) -> Iterator[Database]:
    logdir: Path = tmp_path_factory.mktemp(f"tasks-{request.param}")
    extra = {"DJANGO_TASKS_OPTIONS": json.dumps(OPTIONS)}
    if request.param == "sqlite":
        env = base_env(f"sqlite:///{logdir / 'db.sqlite3'}", None, extra)
        migrate(env)
        yield Database(env, logdir)
        return
    pg_reachable()
    name = create_pg_database()
    try:
        env = base_env(PG_URL.format(name=name), None, extra)
        migrate(env)
        yield Database(env, logdir)
    finally:
        drop_pg_database(name)


class Driver:
    """Django's API in a process of its own, one JSON line per request."""

    def __init__(self, db: Database) -> None:
        self.log = (db.logdir / f"driver-{unique('d')}.log").open("wb")
        self.popen = subprocess.Popen(
            [PYTHON, "-m", "tests.system.tasks_driver"],
            cwd=ROOT,
            env=db.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def ask(self, **req: Any) -> dict[str, Any]:
        assert self.popen.stdin is not None
        assert self.popen.stdout is not None
        self.popen.stdin.write(json.dumps(req) + "\n")
        self.popen.stdin.flush()
        line = self.popen.stdout.readline()
        assert line, f"the driver exited ({self.popen.poll()})"
        answer: dict[str, Any] = json.loads(line)
        assert "exception" not in answer, answer["exception"]
        return answer

    def enqueue(self, task: str, *args: Any, **kwargs: Any) -> str:
        options = {k: kwargs.pop(k) for k in ("run_after_ms", "rollback") if k in kwargs}
        answer = self.ask(op="enqueue", task=task, args=list(args), kwargs=kwargs, **options)
        return str(answer["id"])

    def result(self, id: str) -> dict[str, Any]:
        return self.ask(op="result", id=id)

    def wait(self, id: str, *statuses: str, workers: list[Proc] | None = None) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            found = self.result(id)
            return found if found.get("status") in statuses else None

        try:
            return wait_until(done, f"{id} to be {'/'.join(statuses)}", timeout=60)
        except AssertionError as exc:
            tails = "\n".join(f"--- {w.name}\n{w.tail()}" for w in workers or [])
            raise AssertionError(f"{exc}\nlast: {self.result(id)}\n{tails}") from None

    def close(self) -> None:
        if self.popen.stdin is not None:
            self.popen.stdin.close()
        self.popen.wait(timeout=30)
        self.log.close()


@pytest.fixture
def driver(database: Database) -> Iterator[Driver]:
    d = Driver(database)
    try:
        yield d
    finally:
        d.close()


@pytest.fixture
def workers(database: Database) -> Iterator[list[Proc]]:
    started: list[Proc] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.stop()


def start_worker(db: Database, started: list[Proc], *args: str) -> tuple[Proc, str]:
    """A worker process; returns it and its worker id (printed first)."""
    argv = [PYTHON, "manage.py", "resonate", "worker", *args]
    proc = spawn("worker", argv, db.env, db.logdir)
    started.append(proc)
    line = wait_until(
        lambda: re.search(r"^worker (\S+) on", proc.tail(200), re.M) or not proc.alive(),
        "the worker to start",
    )
    assert proc.alive(), proc.tail()
    assert isinstance(line, re.Match)
    return proc, line.group(1)


def ledger_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


# --- scenarios --------------------------------------------------------------------------------


def test_a_call_returns_its_value(database: Database, driver: Driver, workers: list[Proc]) -> None:
    _, worker_id = start_worker(database, workers)
    id = driver.enqueue("add", 2, 3)
    result = driver.wait(id, "SUCCESSFUL", workers=workers)
    assert result["return_value"] == 5
    assert result["worker_ids"] == [worker_id]
    assert result["attempts"] == 1
    assert result["errors"] == []


def test_a_failing_call_is_retried_up_to_the_limit_with_its_errors(
    database: Database, driver: Driver, workers: list[Proc]
) -> None:
    start_worker(database, workers)
    id = driver.enqueue("explode", "kaboom")
    result = driver.wait(id, "FAILED", workers=workers)
    assert result["attempts"] == OPTIONS["MAX_ATTEMPTS"]
    assert [e["exception_class_path"] for e in result["errors"]] == ["builtins.ValueError"] * 3
    assert all("kaboom" in e["traceback"] for e in result["errors"])


def test_run_after_is_respected(database: Database, driver: Driver, workers: list[Proc]) -> None:
    start_worker(database, workers)
    answer = driver.ask(op="enqueue", task="add", args=[1, 1], kwargs={}, run_after_ms=1_500)
    result = driver.wait(answer["id"], "SUCCESSFUL", workers=workers)
    assert result["started_at"] >= answer["run_after"]


def test_a_rolled_back_enqueue_leaves_nothing(
    database: Database, driver: Driver, workers: list[Proc]
) -> None:
    start_worker(database, workers)
    gone = driver.enqueue("add", 1, 2, rollback=True)
    kept = driver.enqueue("add", 3, 4)
    assert driver.wait(kept, "SUCCESSFUL", workers=workers)["return_value"] == 7
    assert driver.result(gone) == {"missing": True}


def test_a_sigkilled_worker_loses_nothing_and_the_call_settles_once(
    database: Database, driver: Driver, workers: list[Proc]
) -> None:
    ledger = database.logdir / f"{unique('ledger')}.txt"
    first, first_id = start_worker(database, workers)
    id = driver.enqueue("slow", str(ledger), 2.0)
    wait_until(lambda: any(line.startswith("start") for line in ledger_lines(ledger)), "a start")
    first.kill_hard()
    _, second_id = start_worker(database, workers)
    result = driver.wait(id, "SUCCESSFUL", workers=workers)
    assert result["return_value"] == second_id  # the value the second worker settled with
    assert result["worker_ids"] == [first_id, second_id]
    assert [e["exception_class_path"] for e in result["errors"]] == ["tasks_app.jobs.WorkerLost"]
    assert ledger_lines(ledger) == [
        f"start {id} 1 {first_id}",
        f"start {id} 2 {second_id}",
        f"end {id} 2 {second_id}",
    ]


def test_two_workers_never_run_the_same_attempt(
    database: Database, driver: Driver, workers: list[Proc]
) -> None:
    ledger = database.logdir / f"{unique('ledger')}.txt"
    ids = [driver.enqueue("slow", str(ledger), 0.05) for _ in range(30)]
    _, a = start_worker(database, workers, "--concurrency", "2")
    _, b = start_worker(database, workers, "--concurrency", "2")
    results = [driver.wait(id, "SUCCESSFUL", workers=workers) for id in ids]
    starts = Counter(line.split()[1] for line in ledger_lines(ledger) if line.startswith("start"))
    assert starts == dict.fromkeys(ids, 1)
    assert all(r["attempts"] == 1 and r["errors"] == [] for r in results)
    assert {r["return_value"] for r in results} <= {a, b}


def test_sigterm_releases_what_the_worker_holds_past_its_grace(
    database: Database, driver: Driver, workers: list[Proc]
) -> None:
    ledger = database.logdir / f"{unique('ledger')}.txt"
    first, _ = start_worker(database, workers, "--grace", "0.2")
    id = driver.enqueue("slow", str(ledger), 3.0)
    wait_until(lambda: ledger_lines(ledger), "a start")
    first.popen.send_signal(15)
    assert first.popen.wait(timeout=30) == 0, first.tail()
    assert "released" in first.tail()
    released = driver.result(id)
    assert released["status"] == "READY"
    assert released["attempts"] == 0
    _, second_id = start_worker(database, workers)
    result = driver.wait(id, "SUCCESSFUL", workers=workers)
    assert result["worker_ids"] == [second_id]
    assert result["errors"] == []


def test_sigterm_lets_a_running_call_finish(
    database: Database, driver: Driver, workers: list[Proc]
) -> None:
    ledger = database.logdir / f"{unique('ledger')}.txt"
    first, first_id = start_worker(database, workers)
    id = driver.enqueue("slow", str(ledger), 1.0)
    wait_until(lambda: ledger_lines(ledger), "a start")
    first.popen.send_signal(15)
    assert first.popen.wait(timeout=30) == 0, first.tail()
    result = driver.result(id)
    assert result["status"] == "SUCCESSFUL"
    assert result["return_value"] == first_id


def test_an_sdk_program_awaits_a_django_task(
    database: Database, driver: Driver, workers: list[Proc]
) -> None:
    try:
        sdk = python_sdk()
    except Missing as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the Python SDK is missing under CI=true: {exc}")
        pytest.skip(str(exc))
    port = free_port()
    web = spawn(
        "web",
        [PYTHON, "manage.py", "serve", "--host", "127.0.0.1", "--port", str(port)],
        database.env,
        database.logdir,
    )
    workers.append(web)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert web.alive(), web.tail()
        try:
            return httpx.get(url + "/ready", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(ready, "the web process", timeout=90)
    # No worker yet: the SDK finds both pending and listens.
    ids = [driver.enqueue("add", 40, 2), driver.enqueue("explode", "no such order")]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "DJANGO_", "PYTEST_", "VIRTUAL_ENV"))
        and k not in {"DATABASE_URL", "PYTHONPATH"}
    }
    env.update({"RESONATE_URL": url, "PYTHONUNBUFFERED": "1"})
    program = spawn(
        "sdk",
        [str(sdk.python), str(SDK_PROGRAM), json.dumps({"ids": ids, "group": unique("djtasks")})],
        env,
        database.logdir,
    )
    workers.append(program)
    wait_until(lambda: "LISTENING" in program.tail() or not program.alive(), "the SDK")
    start_worker(database, workers)
    line = wait_until(
        lambda: re.search(r"^RESULT (.*)$", program.tail(), re.M) or not program.alive(),
        "the SDK's result",
    )
    assert isinstance(line, re.Match), program.tail()
    value, error = json.loads(line.group(1))
    assert value == {"value": 42}
    assert "no such order" in error["error"]


def readme_worker_command() -> list[str]:
    """The Django tasks guide's worker command, as shown."""
    (line,) = block("docs/how-to/django-tasks.md", "django-tasks-worker").lines()
    return line.split()


def test_the_readme_worker_command_runs_its_queue_only(
    database: Database, driver: Driver, workers: list[Proc]
) -> None:
    argv = readme_worker_command()
    assert argv[:4] == ["python", "manage.py", "resonate", "worker"]
    assert argv[4:] == ["--queue", "emails", "--concurrency", "4"]
    start_worker(database, workers, *argv[4:])
    other = driver.enqueue("elsewhere")
    id = driver.enqueue("receipt", 7)
    result = driver.wait(id, "SUCCESSFUL", workers=workers)
    assert result["return_value"] == "receipt for order 7"
    assert driver.result(other)["status"] == "READY"  # queue "other" is not this worker's
