"""The Python SDK (resonate-sdk 0.8.1), unmodified, against both shapes of the server.

Each test runs real SDK programs (``programs/py_*.py``) as separate processes, checks the result
they print and then reads the durable state back through ``POST /``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def test_hello_world_two_steps(py: Programs, tmp_path: Path) -> None:
    root, ledger = unique("py-hello"), tmp_path / "ledger"
    cfg = {"id": root, "name": "world", "ledger": str(ledger)}
    proc = py.python("py_hello.py", group=unique("g"), **cfg)
    assert py.result(proc) == "HELLO WORLD!"
    # Running the same id again, from another process, answers from the durable result.
    again = py.python("py_hello.py", group=unique("g"), **cfg)
    assert py.result(again) == "HELLO WORLD!"
    assert ledger.read_text().splitlines() == ["greet world"]

    records = lineage(py.server, root)
    assert set(records) == {root, f"{root}:1", f"{root}:2"}
    assert_all_resolved(records)
    assert decode(records[root]) == "HELLO WORLD!"
    assert decode(records[f"{root}:1"]) == "hello world"
    assert decode(records[f"{root}:2"]) == "HELLO WORLD!"
    for child in children(records, root).values():
        assert child["tags"]["resonate:scope"] == "local"
        assert child["tags"]["resonate:parent"] == root
        assert "resonate:target" not in child["tags"]
    # Only the root is a task: ctx.run steps are executed in place, under the root's lease.
    tasks = tasks_of(py.server, set(records))
    assert set(tasks) == {root}
    assert_tasks_fulfilled(tasks)
    assert tasks[root]["version"] == 1  # acquired once, by the first run


def test_countdown_sleeps_durably(py: Programs) -> None:
    root = unique("py-countdown")
    proc = py.python("py_countdown.py", id=root, group=unique("g"), start=3, pause_ms=300)
    assert py.result(proc) == ["T-3", "T-2", "T-1", "liftoff"]

    records = lineage(py.server, root)
    assert_all_resolved(records)
    timers = {pid for pid, p in records.items() if p["tags"].get("resonate:timer") == "true"}
    steps = {pid for pid, p in records.items() if p["tags"].get("resonate:scope") == "local"}
    assert len(timers) == 2
    assert [decode(records[s]) for s in sorted(steps)] == ["T-3", "T-2", "T-1"]
    for timer in timers:
        # A sleep is a promise the server resolves at its deadline (not a timeout rejection).
        assert records[timer]["settledAt"] >= records[timer]["timeoutAt"]
    tasks = tasks_of(py.server, set(records))
    assert set(tasks) == {root} | timers  # a timer is targeted, so it has a task (never run)
    assert_tasks_fulfilled(tasks)
    # The workflow suspended on each timer and was acquired again when it fired.
    assert tasks[root]["version"] >= 2


def test_rpc_to_a_function_only_another_group_registers(py: Programs) -> None:
    root = unique("py-rpc")
    worker_group, caller_group = unique("workers"), unique("callers")
    worker = py.python("py_rpc.py", role="worker", group=worker_group)
    py.ready(worker)
    caller = py.python(
        "py_rpc.py", role="caller", id=root, group=caller_group, x=12, worker_group=worker_group
    )
    result = py.result(caller)
    assert result["square"] == 144
    assert result["worker_pid"] == worker.popen.pid
    assert result["caller_pid"] == caller.popen.pid

    records = lineage(py.server, root)
    assert set(records) == {root, f"{root}:1"}
    assert_all_resolved(records)
    child = records[f"{root}:1"]
    assert child["tags"]["resonate:target"] == f"poll://any@{worker_group}"
    assert records[root]["tags"]["resonate:target"] == f"poll://any@{caller_group}"
    assert decode(child) == {"value": 144, "pid": worker.popen.pid}
    tasks = tasks_of(py.server, set(records))
    assert set(tasks) == {root, f"{root}:1"}
    assert_tasks_fulfilled(tasks)


def test_fan_out_a_hundred_children(py: Programs) -> None:
    root, group, n = unique("py-fanout"), unique("g"), 100
    helper = py.python("py_fanout.py", role="helper", group=group)
    py.ready(helper)
    proc = py.python("py_fanout.py", role="main", id=root, group=group, n=n)
    assert py.result(proc) == {"count": n, "sum": sum(i**3 for i in range(n))}

    records = lineage(py.server, root)
    assert set(records) == {root} | {f"{root}:{i}" for i in range(1, n + 1)}
    assert_all_resolved(records)
    assert sorted(decode(p) for p in children(records, root).values()) == [i**3 for i in range(n)]
    tasks = tasks_of(py.server, set(records))
    assert set(tasks) == set(records)
    assert_tasks_fulfilled(tasks)


def test_detached_child_and_human_in_the_loop(py: Programs, tmp_path: Path) -> None:
    root, group = unique("py-approval"), unique("g")
    ledger = tmp_path / "ledger"
    proc = py.python("py_approval.py", id=root, group=group, order="order-7", ledger=str(ledger))

    # The workflow waits on a promise only someone outside can settle: find it, then settle it.
    def waiting() -> str | None:
        pending = lineage(py.server, root)
        found = [
            pid
            for pid, p in pending.items()
            if p["state"] == "pending" and p["tags"].get("resonate:external") == "true"
        ]
        return found[0] if found else None

    human = poll(waiting, "the workflow to wait on its human promise", py.tails)
    decision = {"approved": True, "by": "alice"}
    settled = py.server.ok("promise.settle", id=human, state="resolved", value=encode(decision))
    assert settled["promise"]["state"] == "resolved"

    result = py.result(proc)
    assert result["outcome"] == "order-7 shipped, approved by alice"
    audits = result["audits"]
    assert len(set(audits)) == 2
    assert all(audit.startswith(f"{root}:d") for audit in audits)
    assert result["audit_results"] == ["finance audited order-7", "legal audited order-7"]
    assert sorted(ledger.read_text().splitlines()) == ["finance order-7", "legal order-7"]

    records = lineage(py.server, root)
    assert_all_resolved(records)
    assert decode(records[human]) == decision
    for audit in audits:
        assert records[audit]["tags"]["resonate:parent"] == root  # detached: off the origin
        assert records[audit]["tags"]["resonate:target"] == f"poll://any@{group}"
    tasks = tasks_of(py.server, set(records))
    assert set(tasks) == {root, *audits}
    assert_tasks_fulfilled(tasks)


def test_schedule_created_through_the_sdk_fires(py: Programs, tmp_path: Path) -> None:
    sched, group = unique("py-every-second"), unique("g")
    ledger = tmp_path / "ledger"
    proc = py.python(
        "py_schedule.py",
        id=sched,
        group=group,
        cron="* * * * * *",
        label="tick",
        ledger=str(ledger),
    )
    fired = poll(
        lambda: resolved_occurrences(py.server, sched, 2), "two resolved occurrences", py.tails
    )
    py.finish(proc)  # SIGTERM: the program deletes the schedule through the SDK
    assert py.result(proc) == {"deleted": sched}
    status, _ = py.server.call("schedule.get", id=sched)
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
    tasks = tasks_of(py.server, set(fired))
    assert set(tasks) == set(fired)
    assert_tasks_fulfilled(tasks)


def test_recovery_after_sigkill_settles_each_step_once(py: Programs, tmp_path: Path) -> None:
    root, group = unique("py-recovery"), unique("g")
    ledger, gate, holding = tmp_path / "ledger", tmp_path / "gate", tmp_path / "holding"
    steps, hold = 5, 2
    cfg: dict[str, Any] = {"group": group, "ttl_ms": TTL_MS, "gate": str(gate)}
    cfg.update(ledger=str(ledger), holding=str(holding))
    first_pid, second_pid = unique("first"), unique("second")
    starter = {"role": "first", "id": root, "steps": steps, "hold": hold, "pid": first_pid}
    first = py.python("py_recovery.py", **starter, **cfg)
    # Step `hold` runs for well over two lease lifetimes: heartbeats keep the lease meanwhile.
    poll(lambda: len(lines(holding)) >= HOLD_LINES, f"step {hold} to hold on", py.tails)
    held = tasks_of(py.server, {root})[root]
    assert (held["state"], held["pid"], held["version"]) == ("acquired", first_pid, 1)

    first.kill_hard()  # SIGKILL mid-workflow: the steps before `hold` are settled, `hold` is not
    assert [step for step, _ in executions(ledger)] == list(range(hold + 1))
    gate.touch()
    second = py.python("py_recovery.py", role="second", pid=second_pid, **cfg)
    settled = wait_settled(py.server, root, py)
    assert settled["state"] == "resolved"
    py.finish(second)

    runs: dict[int, list[str]] = {}
    for step, token in executions(ledger):
        runs.setdefault(step, []).append(token)
    # Settled steps were never run again; only the step cut off by the kill ran twice.
    assert {step: len(tokens) for step, tokens in runs.items()} == {
        i: 2 if i == hold else 1 for i in range(steps)
    }
    assert runs[hold][0].startswith(f"{first.popen.pid}-")
    assert runs[hold][1].startswith(f"{second.popen.pid}-")

    records = lineage(py.server, root)
    assert_all_resolved(records)
    values = [decode(records[f"{root}:{i + 1}"]) for i in range(steps)]
    # Each step's promise holds what its first (and only) settle wrote.
    assert values == [tokens[-1] for _, tokens in sorted(runs.items())]
    assert decode(records[root]) == values
    tasks = tasks_of(py.server, set(records))
    assert set(tasks) == {root}
    assert_tasks_fulfilled(tasks)
    assert tasks[root]["version"] == 2  # the lease expired once; the second worker took it
