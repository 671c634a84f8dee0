"""Fixtures that run the server for real: the production shape (PostgreSQL, Redis, ``manage.py
serve --no-embedded``, a Celery worker and Celery beat) and the embedded shape (``manage.py serve``
alone on a SQLite file). Each session gets fresh databases; pytest-django's test database is not
used."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import (
    PG_URL,
    PUSH_TOKEN,
    REDIS_URL,
    Outbox,
    Receiver,
    Stack,
    base_env,
    create_pg_database,
    drop_pg_database,
    flush_redis,
    free_port,
    migrate,
)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "integration: starts real server processes (PostgreSQL, Redis, Celery)"
    )


def require_services() -> None:
    """PostgreSQL and Redis are real dependencies: missing under CI=true fails, elsewhere the
    production-shape tests are skipped with the reason."""
    import psycopg
    import redis

    try:
        psycopg.connect(PG_URL.format(name="postgres"), connect_timeout=5).close()
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=5).ping()
    except Exception as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL/Redis unreachable under CI=true: {exc}")
        pytest.skip(f"PostgreSQL/Redis unreachable: {exc}")


@contextlib.contextmanager
def production_stack(logdir: Path, extra: dict[str, str], *, beat: bool) -> Iterator[Stack]:
    """The production shape on a fresh PostgreSQL database and a flushed Redis: a web process
    (``--no-embedded``), a Celery worker and, with ``beat``, Celery beat; dropped afterwards."""
    require_services()
    name = create_pg_database()
    stack = None
    try:
        flush_redis()
        env = base_env(PG_URL.format(name=name), REDIS_URL, extra)
        migrate(env)
        stack = Stack(
            "production", f"http://127.0.0.1:{free_port()}", env, logdir, Outbox(pg_name=name)
        )
        stack.start_web("--no-embedded")
        stack.start_worker()
        if beat:
            stack.start_beat()
        yield stack
    finally:
        if stack is not None:
            stack.stop()
        drop_pg_database(name)


@contextlib.contextmanager
def embedded_stack(logdir: Path, extra: dict[str, str]) -> Iterator[Stack]:
    """The embedded shape on a fresh SQLite file: one ``serve`` process runs everything."""
    db = logdir / "resonate.sqlite3"
    env = base_env(f"sqlite:///{db}", None, extra)
    migrate(env)
    stack = Stack(
        "embedded", f"http://127.0.0.1:{free_port()}", env, logdir, Outbox(sqlite_path=db)
    )
    try:
        stack.start_web()
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def production(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # One push at a time, so a worker killed mid-drain provably leaves undelivered messages.
    extra = {"RESONATE_PUSH_CONCURRENCY": "1"}
    with production_stack(tmp_path_factory.mktemp("production"), extra, beat=True) as stack:
        yield stack


@pytest.fixture(scope="session")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    credentials = json.dumps({"127.0.0.1": f"Bearer {PUSH_TOKEN}"})
    extra = {"RESONATE_PUSH_CREDENTIALS": credentials}
    with embedded_stack(tmp_path_factory.mktemp("embedded"), extra) as stack:
        yield stack


@pytest.fixture(params=["production", "embedded"])
def stack(request: pytest.FixtureRequest) -> Stack:
    """Either shape, for the scenarios both must pass."""
    shape: Stack = request.getfixturevalue(request.param)
    return shape


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def unavailable(run: str, reason: str) -> None:
    """A round's real dependency is missing: skip with the reason, or fail under ``CI=true``."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and the {run} run cannot start: {reason}", pytrace=False)
    pytest.skip(reason)
