"""The official SDKs against the server, end to end.

Every test runs against both shapes of the server, one at a time (a session-scoped parameter):
``embedded`` (``manage.py serve`` alone, SQLite) and ``production`` (PostgreSQL, Redis,
``manage.py serve --no-embedded``, a Celery worker and Celery beat). The processes are started
with ``tests.system.harness``. The SDK toolchains are set up under ``.e2e/`` by ``tools``;
when one cannot be had the tests that need it are skipped with the reason, except under
``CI=true``, where that fails them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.system.harness import (
    PG_URL,
    REDIS_URL,
    TIMINGS,
    Outbox,
    Stack,
    base_env,
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate,
)

from . import tools
from .sdk import Programs

# The server runs with its own defaults except two: a faster tick, so that timers, schedules and
# expired leases are found sooner, and a retry timeout that outlives the session, so that a
# pending task is never offered again on its own: every `execute` an SDK acts on was delivered
# the first time, and a lost delivery fails a test instead of being papered over 5 s later. The
# harness's other test timings are dropped.
SETTINGS = {"RESONATE_TICK_INTERVAL_MS": "200", "RESONATE_RETRY_TIMEOUT_MS": "600000"}


def _server_env(database_url: str, broker_url: str | None) -> dict[str, str]:
    env = base_env(database_url, broker_url, SETTINGS)
    for key in TIMINGS:
        if key not in SETTINGS:
            env.pop(key, None)
    return env


def _redis_url() -> str:
    """A Redis database of our own (the integration tests use 9), one per xdist worker: two
    production stacks on one database would consume each other's Celery ticks."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = 10 + (int(worker) if worker.isdigit() else 0)
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{index}"
    client = redis.Redis.from_url(url, socket_timeout=5)
    try:
        client.flushdb()
    finally:
        client.close()
    return url


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "e2e: runs the official Python and TypeScript SDKs against a live server"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here:
            item.add_marker(pytest.mark.e2e)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and a tool is missing: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def py_sdk() -> tools.PythonSdk:
    try:
        return tools.python_sdk()
    except tools.Missing as exc:
        _unavailable(f"Python SDK: {exc}")
        raise


@pytest.fixture(scope="session")
def node_sdk() -> tools.NodeSdk:
    try:
        return tools.node_sdk()
    except tools.Missing as exc:
        _unavailable(f"TypeScript SDK: {exc}")
        raise


def _embedded(logdir: Path, extra: dict[str, str] | None = None) -> Iterator[Stack]:
    """``manage.py serve`` alone on a fresh SQLite file; ``extra``: settings on top of SETTINGS."""
    db = logdir / "resonate.sqlite3"
    env = {**_server_env(f"sqlite:///{db}", None), **(extra or {})}
    migrate(env)
    url = f"http://127.0.0.1:{free_port()}"
    stack = Stack("embedded", url, env, logdir, Outbox(sqlite_path=db))
    try:
        stack.start_web()
        yield stack
    finally:
        stack.stop()


def _production(logdir: Path, extra: dict[str, str] | None = None) -> Iterator[Stack]:
    """PostgreSQL, Redis, web, Celery worker and beat; ``extra``: settings on top of SETTINGS."""
    name = create_pg_database()
    stack = None
    try:
        env = {**_server_env(PG_URL.format(name=name), _redis_url()), **(extra or {})}
        migrate(env)
        url = f"http://127.0.0.1:{free_port()}"
        stack = Stack("production", url, env, logdir, Outbox(pg_name=name))
        stack.start_web("--no-embedded")
        stack.start_worker()
        stack.start_beat()
        yield stack
    finally:
        if stack is not None:
            stack.stop()
        drop_pg_database(name)


@pytest.fixture(scope="session", params=["embedded", "production"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """One shape at a time: pytest groups the tests by this parameter."""
    logdir = tmp_path_factory.mktemp(f"e2e-{request.param}")
    shape = _embedded if request.param == "embedded" else _production
    yield from shape(logdir)


@pytest.fixture
def programs(server: Stack, tmp_path: Path) -> Iterator[Programs]:
    running = Programs(server, tmp_path)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def py(programs: Programs, py_sdk: tools.PythonSdk) -> Programs:
    programs.py_sdk = py_sdk
    return programs


@pytest.fixture
def ts(programs: Programs, node_sdk: tools.NodeSdk) -> Programs:
    programs.node_sdk = node_sdk
    return programs
