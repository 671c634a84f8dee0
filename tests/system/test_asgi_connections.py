"""Django's ASGI handler runs each sync view (the resource API, the admin, ``/ready``) in a
thread of that request's own, so a connection kept for ``CONN_MAX_AGE`` would stay open with
nobody to use it again, one per request, until PostgreSQL's ``max_connections`` is gone. Each
such request closes its connections as it finishes (``resonate_project.embed.asgi``); the
protocol's own threads keep theirs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from .conftest import require_services
from .harness import (
    FAR,
    PG_ADMIN_URL,
    PG_URL,
    Outbox,
    Stack,
    base_env,
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate,
    unique,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    require_services()
    logdir: Path = tmp_path_factory.mktemp("asgi-connections")
    name = create_pg_database()
    env = base_env(PG_URL.format(name=name), None, {})
    stack = Stack("web", f"http://127.0.0.1:{free_port()}", env, logdir, Outbox(name))
    try:
        migrate(env)
        stack.start_web("--no-embedded")
        yield stack, name
    finally:
        stack.stop()
        drop_pg_database(name)


def backends(name: str) -> int:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def test_resource_api_requests_leave_no_connection_open(web: tuple[Stack, str]) -> None:
    stack, name = web
    stack.ok("promise.create", id=unique("conn"), timeoutAt=FAR)
    with httpx.Client(base_url=stack.base_url, timeout=30) as client:
        assert client.get("/api/promises").status_code == 200
        before = backends(name)
        for _ in range(40):
            assert client.get("/api/promises").status_code == 200
            assert client.get("/ready").status_code == 200
    # 80 requests later, no more connections than after the first: none was left behind.
    assert backends(name) <= before
    # The protocol's own connections are still there and still answer.
    stack.ok("promise.create", id=unique("conn"), timeoutAt=FAR)
