"""The official SDKs, unmodified, against both shapes of the server: the Python SDK (resonate-sdk
0.8.1) and the TypeScript SDK (@resonatehq/sdk 0.11.5, Node with a ``Promise.withResolvers``
polyfill), each test once per SDK.

Each test runs real SDK programs (``programs/py_*.py``, ``programs/ts_*.mjs``) as separate
processes, checks the result they print and then reads the durable state back through ``POST /``.
Where the SDKs differ, :class:`Sdk` says how: the TypeScript SDK numbers children from 0
(``root:0``, ``root:1``), the Python SDK from 1, and each marks a promise only a human settles in
its own way. The TypeScript SDK's canonical workloads are tests/e2e/test_sdk_typescript.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.system.harness import Proc

from .sdk import (
    Programs,
    assert_all_resolved,
    assert_tasks_fulfilled,
    children,
    decode,
    encode,
    executions,
    lineage,
    lines,
    poll,
    resolved_occurrences,
    tasks_of,
    unique,
    wait_settled,
)

TTL_MS = 2000  # the recovery workers' lease; the SDKs heartbeat every TTL_MS / 2
HOLD_LINES = 25  # ~5 s of holding, written every 200 ms: two and a half leases


def _python_human(pid: str, record: dict[str, Any], root: str) -> bool:
    return record["state"] == "pending" and record["tags"].get("resonate:external") == "true"


def _typescript_human(pid: str, record: dict[str, Any], root: str) -> bool:
    # TypeScript marks ctx.promise() only with scope=global: no target, no timer.
    tags = record["tags"]
    return (
        pid != root
        and record["state"] == "pending"
        and tags.get("resonate:scope") == "global"
        and "resonate:target" not in tags
        and "resonate:timer" not in tags
    )


@dataclass(frozen=True)
class Sdk:
    """One SDK as these tests drive it: its programs, and what its records look like."""

    name: str
    prefix: str  # the programs' file prefix and the tests' id prefix
    suffix: str  # the programs' file suffix
    first: int  # the number of a workflow's first child
    is_human: Callable[[str, dict[str, Any], str], bool]  # the promise only someone outside settles
    tags_root_target: bool  # asserted of this SDK: the root carries its own group's target
    tags_detached_parent: bool  # asserted of this SDK: a detached child's parent is the root

    def start(self, programs: Programs, program: str, **cfg: Any) -> Proc:
        script = f"{self.prefix}_{program}{self.suffix}"
        if self.suffix == ".py":
            return programs.python(script, **cfg)
        return programs.node(script, **cfg)


PYTHON = Sdk("python", "py", ".py", 1, _python_human, True, True)
TYPESCRIPT = Sdk("typescript", "ts", ".mjs", 0, _typescript_human, False, False)


@pytest.fixture(params=[PYTHON, TYPESCRIPT], ids=lambda sdk: sdk.name)
def sdk(request: pytest.FixtureRequest, programs: Programs) -> tuple[Sdk, Programs]:
    chosen: Sdk = request.param
    if chosen is PYTHON:
        programs.py_sdk = request.getfixturevalue("py_sdk")
    else:
        programs.node_sdk = request.getfixturevalue("node_sdk")
    return chosen, programs


def test_hello_world_two_steps(sdk: tuple[Sdk, Programs], tmp_path: Path) -> None:
    kit, run = sdk
    root, ledger = unique(f"{kit.prefix}-hello"), tmp_path / "ledger"
    first, second = f"{root}:{kit.first}", f"{root}:{kit.first + 1}"
    cfg = {"id": root, "name": "world", "ledger": str(ledger)}
    proc = kit.start(run, "hello", group=unique("g"), **cfg)
    assert run.result(proc) == "HELLO WORLD!"
    # Running the same id again, from another process, answers from the durable result.
    again = kit.start(run, "hello", group=unique("g"), **cfg)
    assert run.result(again) == "HELLO WORLD!"
    assert ledger.read_text().splitlines() == ["greet world"]

    records = lineage(run.server, root)
    assert set(records) == {root, first, second}
    assert_all_resolved(records)
    assert decode(records[root]) == "HELLO WORLD!"
    assert decode(records[first]) == "hello world"
    assert decode(records[second]) == "HELLO WORLD!"
    for child in children(records, root).values():
        assert child["tags"]["resonate:scope"] == "local"
        assert child["tags"]["resonate:parent"] == root
        assert "resonate:target" not in child["tags"]
    # Only the root is a task: ctx.run steps are executed in place, under the root's lease.
    tasks = tasks_of(run.server, set(records))
    assert set(tasks) == {root}
    assert_tasks_fulfilled(tasks)
    assert tasks[root]["version"] == 1  # acquired once, by the first run


def test_countdown_sleeps_durably(sdk: tuple[Sdk, Programs]) -> None:
    kit, run = sdk
    root = unique(f"{kit.prefix}-countdown")
    proc = kit.start(run, "countdown", id=root, group=unique("g"), start=3, pause_ms=300)
    assert run.result(proc) == ["T-3", "T-2", "T-1", "liftoff"]

    records = lineage(run.server, root)
    assert_all_resolved(records)
    timers = {pid for pid, p in records.items() if p["tags"].get("resonate:timer") == "true"}
    steps = {pid for pid, p in records.items() if p["tags"].get("resonate:scope") == "local"}
    assert len(timers) == 2
    assert [decode(records[s]) for s in sorted(steps)] == ["T-3", "T-2", "T-1"]
    for timer in timers:
        # A sleep is a promise the server resolves at its deadline (not a timeout rejection).
        assert records[timer]["settledAt"] >= records[timer]["timeoutAt"]
    tasks = tasks_of(run.server, set(records))
    assert set(tasks) == {root} | timers  # a timer is targeted, so it has a task (never run)
    assert_tasks_fulfilled(tasks)
    # The workflow suspended on each timer and was acquired again when it fired.
    assert tasks[root]["version"] >= 2


def test_rpc_to_a_function_only_another_group_registers(sdk: tuple[Sdk, Programs]) -> None:
    kit, run = sdk
    root = unique(f"{kit.prefix}-rpc")
    remote = f"{root}:{kit.first}"
    worker_group, caller_group = unique("workers"), unique("callers")
    worker = kit.start(run, "rpc", role="worker", group=worker_group)
    run.ready(worker)
    caller = kit.start(
        run, "rpc", role="caller", id=root, group=caller_group, x=12, worker_group=worker_group
    )
    result = run.result(caller)
    assert result["square"] == 144
    assert result["worker_pid"] == worker.popen.pid
    assert result["caller_pid"] == caller.popen.pid

    records = lineage(run.server, root)
    assert set(records) == {root, remote}
    assert_all_resolved(records)
    child = records[remote]
    assert child["tags"]["resonate:target"] == f"poll://any@{worker_group}"
    if kit.tags_root_target:
        assert records[root]["tags"]["resonate:target"] == f"poll://any@{caller_group}"
    assert decode(child) == {"value": 144, "pid": worker.popen.pid}
    tasks = tasks_of(run.server, set(records))
    assert set(tasks) == {root, remote}
    assert_tasks_fulfilled(tasks)


def test_fan_out_a_hundred_children(sdk: tuple[Sdk, Programs]) -> None:
    kit, run = sdk
    root, group, n = unique(f"{kit.prefix}-fanout"), unique("g"), 100
    helper = kit.start(run, "fanout", role="helper", group=group)
    run.ready(helper)
    proc = kit.start(run, "fanout", role="main", id=root, group=group, n=n)
    assert run.result(proc) == {"count": n, "sum": sum(i**3 for i in range(n))}

    records = lineage(run.server, root)
    assert set(records) == {root} | {f"{root}:{i}" for i in range(kit.first, kit.first + n)}
    assert_all_resolved(records)
    assert sorted(decode(p) for p in children(records, root).values()) == [i**3 for i in range(n)]
    tasks = tasks_of(run.server, set(records))
    assert set(tasks) == set(records)
    assert_tasks_fulfilled(tasks)


def test_detached_child_and_human_in_the_loop(sdk: tuple[Sdk, Programs], tmp_path: Path) -> None:
    kit, run = sdk
    root, group = unique(f"{kit.prefix}-approval"), unique("g")
    ledger = tmp_path / "ledger"
    proc = kit.start(run, "approval", id=root, group=group, order="order-7", ledger=str(ledger))

    # The workflow waits on a promise only someone outside can settle: find it, then settle it.
    def waiting() -> str | None:
        pending = lineage(run.server, root)
        found = [pid for pid, p in pending.items() if kit.is_human(pid, p, root)]
        return found[0] if found else None

    human = poll(waiting, "the workflow to wait on its human promise", run.tails)
    decision = {"approved": True, "by": "alice"}
    settled = run.server.ok("promise.settle", id=human, state="resolved", value=encode(decision))
    assert settled["promise"]["state"] == "resolved"

    result = run.result(proc)
    assert result["outcome"] == "order-7 shipped, approved by alice"
    audits = result["audits"]
    assert len(set(audits)) == 2
    assert all(audit.startswith(f"{root}:d") for audit in audits)
    assert result["audit_results"] == ["finance audited order-7", "legal audited order-7"]
    assert sorted(ledger.read_text().splitlines()) == ["finance order-7", "legal order-7"]

    records = lineage(run.server, root)
    assert_all_resolved(records)
    assert decode(records[human]) == decision
    for audit in audits:
        if kit.tags_detached_parent:
            assert records[audit]["tags"]["resonate:parent"] == root  # detached: off the origin
        assert records[audit]["tags"]["resonate:target"] == f"poll://any@{group}"
    tasks = tasks_of(run.server, set(records))
    assert set(tasks) == {root, *audits}
    assert_tasks_fulfilled(tasks)


def test_schedule_created_through_the_sdk_fires(sdk: tuple[Sdk, Programs], tmp_path: Path) -> None:
    kit, run = sdk
    sched, group = unique(f"{kit.prefix}-every-second"), unique("g")
    ledger = tmp_path / "ledger"
    proc = kit.start(
        run,
        "schedule",
        id=sched,
        group=group,
        cron="* * * * * *",
        label="tick",
        ledger=str(ledger),
    )
    fired = poll(
        lambda: resolved_occurrences(run.server, sched, 2), "two resolved occurrences", run.tails
    )
    run.finish(proc)  # SIGTERM: the program deletes the schedule through the SDK
    assert run.result(proc) == {"deleted": sched}
    status, _ = run.server.call("schedule.get", id=sched)
    assert status == 404

    for occurrence in fired.values():
        stamp = occurrence["id"].removeprefix(f"{sched}-")
        assert stamp.isdigit()
        assert int(stamp) % 1000 == 0
        assert occurrence["tags"]["resonate:schedule"] == sched
        assert occurrence["tags"]["resonate:target"] == f"poll://any@{group}"
        assert decode(occurrence) == f"tick at {occurrence['id']}"
    ran = {line.split()[0] for line in ledger.read_text().splitlines()}
    assert set(fired) <= ran
    tasks = tasks_of(run.server, set(fired))
    assert set(tasks) == set(fired)
    assert_tasks_fulfilled(tasks)


def test_recovery_after_sigkill_settles_each_step_once(
    sdk: tuple[Sdk, Programs], tmp_path: Path
) -> None:
    kit, run = sdk
    root, group = unique(f"{kit.prefix}-recovery"), unique("g")
    ledger, gate, holding = tmp_path / "ledger", tmp_path / "gate", tmp_path / "holding"
    steps, hold = 5, 2
    cfg: dict[str, Any] = {"group": group, "ttl_ms": TTL_MS, "gate": str(gate)}
    cfg.update(ledger=str(ledger), holding=str(holding))
    first_pid, second_pid = unique("first"), unique("second")
    starter = {"role": "first", "id": root, "steps": steps, "hold": hold, "pid": first_pid}
    first = kit.start(run, "recovery", **starter, **cfg)
    # Step `hold` runs for well over two lease lifetimes: heartbeats keep the lease meanwhile.
    poll(lambda: len(lines(holding)) >= HOLD_LINES, f"step {hold} to hold on", run.tails)
    held = tasks_of(run.server, {root})[root]
    assert (held["state"], held["pid"], held["version"]) == ("acquired", first_pid, 1)

    first.kill_hard()  # SIGKILL mid-workflow: the steps before `hold` are settled, `hold` is not
    assert [step for step, _ in executions(ledger)] == list(range(hold + 1))
    gate.touch()
    second = kit.start(run, "recovery", role="second", pid=second_pid, **cfg)
    settled = wait_settled(run.server, root, run)
    assert settled["state"] == "resolved"
    run.finish(second)

    runs: dict[int, list[str]] = {}
    for step, token in executions(ledger):
        runs.setdefault(step, []).append(token)
    # Settled steps were never run again; only the step cut off by the kill ran twice.
    assert {step: len(tokens) for step, tokens in runs.items()} == {
        i: 2 if i == hold else 1 for i in range(steps)
    }
    assert runs[hold][0].startswith(f"{first.popen.pid}-")
    assert runs[hold][1].startswith(f"{second.popen.pid}-")

    records = lineage(run.server, root)
    assert_all_resolved(records)
    values = [decode(records[f"{root}:{i + kit.first}"]) for i in range(steps)]
    # Each step's promise holds what its first (and only) settle wrote.
    assert values == [tokens[-1] for _, tokens in sorted(runs.items())]
    assert decode(records[root]) == values
    tasks = tasks_of(run.server, set(records))
    assert set(tasks) == {root}
    assert_tasks_fulfilled(tasks)
    assert tasks[root]["version"] == 2  # the lease expired once; the second worker took it
