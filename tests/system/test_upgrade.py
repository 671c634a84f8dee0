"""Upgrades without stopping (docs/how-to/upgrading.md): the newest migrations are applied while
the previous release still serves, so that release must keep working on the newest schema. Here
the previous release's own code (``git archive`` of ``PREVIOUS``) runs ``manage.py serve`` on a
PostgreSQL database migrated by this tree, and answers the protocol's basic kinds; then this
tree's server reads what it wrote.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.release import PREVIOUS, git_at_previous
from tests.system.harness import (
    FAR,
    PG_DIRECT_URL,
    PYTHON,
    ROOT,
    Outbox,
    Proc,
    Stack,
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate,
    spawn,
    unique,
)

from .conftest import require_services


def previous_release(into: Path) -> Path:
    """The previous release's tree, from this clone's history."""
    archive = into / "previous.tar"
    git_at_previous("archive", "--format=tar", "-o", str(archive), PREVIOUS)
    tree = into / "previous"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


@pytest.fixture
def database() -> Iterator[str]:
    require_services()
    name = create_pg_database()
    try:
        yield name
    finally:
        drop_pg_database(name)


def serve(stack: Stack, manage: Path) -> Proc:
    port = stack.base_url.rsplit(":", 1)[1]
    argv = [PYTHON, str(manage), "serve", "--host", "127.0.0.1", "--port", port]
    proc = spawn(f"web-{manage.parent.name}", argv, stack.env, stack.logdir)
    stack.procs["web"] = proc
    stack.wait_ready()
    return proc


def test_the_previous_release_serves_on_the_newest_schema(database: str, tmp_path: Path) -> None:
    from tests.e2e.conftest import _server_env

    previous = previous_release(tmp_path)
    # Directly, never through INTEGRATION_PG_URL's pooler: the previous release has no
    # DATABASE_POOLER, so its server-side cursors would not survive transaction pooling.
    env = _server_env(PG_DIRECT_URL.format(name=database), None)
    migrate(env)  # this tree's migrations, all of them
    stack = Stack("upgrade", f"http://127.0.0.1:{free_port()}", env, tmp_path, Outbox(database))
    plain, target, external = unique("up-p"), unique("up-t"), unique("up-x")
    schedule_id = unique("up-s")
    try:
        old = serve(stack, previous / "manage.py")
        assert "django-resonate serving on" in old.tail()  # that release's start line
        stack.ok("promise.create", id=plain, timeoutAt=FAR, param={}, tags={})
        created = stack.ok(
            "promise.create",
            id=target,
            timeoutAt=FAR,
            param={},
            tags={"resonate:target": "poll://any@upgrade"},
        )
        assert created["promise"]["state"] == "pending"
        stack.ok(
            "promise.create",
            id=external,
            timeoutAt=FAR,
            param={},
            tags={"resonate:external": "true"},
        )
        stack.ok("promise.register_listener", awaited=external, address="poll://uni@upgrade/l")
        stack.ok("promise.settle", id=external, state="resolved", value={"data": "ok"})
        acquired = stack.ok("task.acquire", id=target, version=0, pid="w1", ttl=60_000)
        assert acquired["task"]["version"] == 1
        settle = {
            "kind": "promise.settle",
            "head": {},
            "data": {"id": target, "state": "resolved", "value": {"data": "done"}},
        }
        stack.ok("task.fulfill", id=target, version=1, action=settle)
        stack.ok(
            "schedule.create",
            id=schedule_id,
            cron="0 0 1 1 *",
            promiseId=f"{schedule_id}.{{{{.timestamp}}}}",
            promiseTimeout=60_000,
            promiseParam={},
            promiseTags={},
        )
        found = stack.ok("promise.search", tags={"resonate:target": "poll://any@upgrade"})
        assert [p["id"] for p in found["promises"]] == [target]
        stack.ok("promise.settle", id=plain, state="rejected", value={})
        old.stop()

        serve(stack, ROOT / "manage.py")  # the new release on the same database
        assert stack.ok("promise.get", id=target)["promise"]["state"] == "resolved"
        assert stack.ok("promise.get", id=plain)["promise"]["state"] == "rejected"
        assert stack.ok("promise.get", id=external)["promise"]["state"] == "resolved"
        assert stack.ok("task.get", id=target)["task"]["state"] == "fulfilled"
        assert stack.ok("schedule.get", id=schedule_id)["schedule"]["cron"] == "0 0 1 1 *"
        stack.ok("schedule.delete", id=schedule_id)
    finally:
        stack.stop()
