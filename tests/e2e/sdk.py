"""Running SDK programs against a server, and reading back what the server recorded.

The programs are real SDK processes (``programs/``): each takes one JSON argument, prints
``RESULT <json>`` when it has its answer and, as a worker, serves until SIGTERM. Everything the
tests assert about durable state is read back through ``POST /`` (promise.get, promise.search,
task.search), never from the database.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.system.harness import Proc, Stack, spawn

from .tools import NodeSdk, PythonSdk, env_for_programs

PROGRAMS = Path(__file__).resolve().parent / "programs"
RESULT_WAIT = 90.0  # seconds a program may take to print its result on a loaded machine


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def poll[T](probe: Callable[[], T | None], what: str, on_timeout: Callable[[], str]) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + RESULT_WAIT
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n{on_timeout()}")
        time.sleep(0.05)


def encode(value: Any) -> dict[str, Any]:
    """A value as both SDKs write it: base64 of its JSON."""
    return {"headers": {}, "data": base64.b64encode(json.dumps(value).encode()).decode()}


def decode(record: dict[str, Any]) -> Any:
    data = record["value"].get("data")
    if not data:
        return None
    return json.loads(base64.b64decode(data))


@dataclass
class Programs:
    """The SDK processes of one test; :meth:`close` stops whatever is still running."""

    server: Stack
    logdir: Path
    py_sdk: PythonSdk | None = None
    node_sdk: NodeSdk | None = None
    procs: list[Proc] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # added to every program's environment

    def python(self, script: str, **cfg: Any) -> Proc:
        assert self.py_sdk is not None
        argv = [str(self.py_sdk.python), str(PROGRAMS / script), json.dumps(cfg)]
        return self._start(script, argv)

    def node(self, program: str, **cfg: Any) -> Proc:
        assert self.node_sdk is not None
        return self._start(program, self.node_sdk.argv(program, json.dumps(cfg)))

    def _start(self, name: str, argv: list[str]) -> Proc:
        env = {**env_for_programs(self.server.base_url), **self.env}
        proc = spawn(name, argv, env, self.logdir)
        self.procs.append(proc)
        return proc

    def result(self, proc: Proc) -> Any:
        """Wait for the program's ``RESULT`` line; fail with every log tail if it exits first."""

        def probe() -> tuple[Any] | None:
            found = _result_line(proc)
            if found is not None:
                return found
            if not proc.alive():
                raise AssertionError(
                    f"{proc.name} exited ({proc.popen.returncode}) without a result\n{self.tails()}"
                )
            return None

        return poll(probe, f"{proc.name} to print its result", self.tails)[0]

    def ready(self, proc: Proc) -> None:
        """Wait until a worker program says it is serving."""

        def probe() -> bool:
            if "READY" in proc.tail(400):
                return True
            if not proc.alive():
                raise AssertionError(f"{proc.name} exited before serving\n{self.tails()}")
            return False

        poll(probe, f"{proc.name} to serve", self.tails)

    def finish(self, proc: Proc) -> None:
        """SIGTERM a worker and wait for it to exit on its own."""
        proc.stop()

    def tails(self) -> str:
        parts = [f"--- program {p.name} ({p.log})\n{p.tail(60)}" for p in self.procs]
        return "\n".join([*parts, self.server.tails()])

    def close(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()


def _result_line(proc: Proc) -> tuple[Any] | None:
    try:
        text = proc.log.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return (json.loads(line[len("RESULT ") :]),)
    return None


# --- reading the server back -------------------------------------------------------------------


def _pages(server: Stack, kind: str, key: str, **query: Any) -> Iterator[dict[str, Any]]:
    cursor: str | None = None
    while True:
        data = dict(query, limit=1000)
        if cursor is not None:
            data["cursor"] = cursor
        page = server.ok(kind, **data)
        yield from page[key]
        cursor = page.get("cursor")
        if cursor is None:
            return


def lineage(server: Stack, origin: str) -> dict[str, dict[str, Any]]:
    """Every promise whose ``resonate:origin`` tag is ``origin`` (a root and all it started)."""
    return {
        p["id"]: p
        for p in _pages(server, "promise.search", "promises", tags={"resonate:origin": origin})
    }


def tasks_of(server: Stack, ids: set[str]) -> dict[str, dict[str, Any]]:
    """The task records (viewed) of the given promise ids; ids without a task are absent."""
    return {t["id"]: t for t in _pages(server, "task.search", "tasks") if t["id"] in ids}


def promise(server: Stack, promise_id: str) -> dict[str, Any]:
    record: dict[str, Any] = server.ok("promise.get", id=promise_id)["promise"]
    return record


def wait_settled(server: Stack, promise_id: str, programs: Programs) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        status, data = server.call("promise.get", id=promise_id)
        if status == 200 and data["promise"]["state"] != "pending":
            record: dict[str, Any] = data["promise"]
            return record
        return None

    return poll(probe, f"{promise_id} to settle", programs.tails)


def children(records: dict[str, dict[str, Any]], root: str) -> dict[str, dict[str, Any]]:
    return {pid: p for pid, p in records.items() if pid != root}


def assert_all_resolved(records: dict[str, dict[str, Any]]) -> None:
    unresolved = {pid: p["state"] for pid, p in records.items() if p["state"] != "resolved"}
    assert not unresolved, f"promises not resolved: {unresolved}"


def assert_tasks_fulfilled(tasks: dict[str, dict[str, Any]]) -> None:
    open_tasks = {tid: t["state"] for tid, t in tasks.items() if t["state"] != "fulfilled"}
    assert not open_tasks, f"tasks not fulfilled: {open_tasks}"


def resolved_occurrences(
    server: Stack, schedule_id: str, at_least: int
) -> dict[str, dict[str, Any]] | None:
    """The resolved promises a schedule fired, once there are ``at_least`` of them."""
    found = {
        p["id"]: p
        for p in _pages(
            server, "promise.search", "promises", tags={"resonate:schedule": schedule_id}
        )
        if p["state"] == "resolved"
    }
    return found if len(found) >= at_least else None


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def executions(ledger: Path) -> list[tuple[int, str]]:
    """``(step, token)`` lines a recovery program wrote, in order."""
    if not ledger.exists():
        return []
    rows = []
    for line in ledger.read_text().splitlines():
        step, token = line.split()
        rows.append((int(step), token))
    return rows
