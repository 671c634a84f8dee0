"""The TypeScript SDK (@resonatehq/sdk 0.11.5), unmodified, against both shapes of the server.

Each test runs real SDK programs (``programs/ts_*.mjs``, Node with a ``Promise.withResolvers``
polyfill) as separate processes, checks the result they print and then reads the durable state
back through ``POST /``. The TypeScript SDK numbers children from 0 (``root:0``, ``root:1``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

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


def test_hello_world_two_steps(ts: Programs, tmp_path: Path) -> None:
    root, ledger = unique("ts-hello"), tmp_path / "ledger"
    cfg = {"id": root, "name": "world", "ledger": str(ledger)}
    proc = ts.node("ts_hello.mjs", group=unique("g"), **cfg)
    assert ts.result(proc) == "HELLO WORLD!"
    # Running the same id again, from another process, answers from the durable result.
    again = ts.node("ts_hello.mjs", group=unique("g"), **cfg)
    assert ts.result(again) == "HELLO WORLD!"
    assert ledger.read_text().splitlines() == ["greet world"]

    records = lineage(ts.server, root)
    assert set(records) == {root, f"{root}:0", f"{root}:1"}
    assert_all_resolved(records)
    assert decode(records[root]) == "HELLO WORLD!"
    assert decode(records[f"{root}:0"]) == "hello world"
    assert decode(records[f"{root}:1"]) == "HELLO WORLD!"
    for child in children(records, root).values():
        assert child["tags"]["resonate:scope"] == "local"
        assert child["tags"]["resonate:parent"] == root
        assert "resonate:target" not in child["tags"]
    tasks = tasks_of(ts.server, set(records))
    assert set(tasks) == {root}
    assert_tasks_fulfilled(tasks)
    assert tasks[root]["version"] == 1  # acquired once, by the first run


def test_countdown_sleeps_durably(ts: Programs) -> None:
    root = unique("ts-countdown")
    proc = ts.node("ts_countdown.mjs", id=root, group=unique("g"), start=3, pause_ms=300)
    assert ts.result(proc) == ["T-3", "T-2", "T-1", "liftoff"]

    records = lineage(ts.server, root)
    assert_all_resolved(records)
    timers = {pid for pid, p in records.items() if p["tags"].get("resonate:timer") == "true"}
    steps = {pid for pid, p in records.items() if p["tags"].get("resonate:scope") == "local"}
    assert len(timers) == 2
    assert [decode(records[s]) for s in sorted(steps)] == ["T-3", "T-2", "T-1"]
    for timer in timers:
        assert records[timer]["settledAt"] >= records[timer]["timeoutAt"]
    tasks = tasks_of(ts.server, set(records))
    assert set(tasks) == {root} | timers  # a timer is targeted, so it has a task (never run)
    assert_tasks_fulfilled(tasks)
    assert tasks[root]["version"] >= 2


def test_rpc_to_a_function_only_another_group_registers(ts: Programs) -> None:
    root = unique("ts-rpc")
    worker_group, caller_group = unique("workers"), unique("callers")
    worker = ts.node("ts_rpc.mjs", role="worker", group=worker_group)
    ts.ready(worker)
    caller = ts.node(
        "ts_rpc.mjs", role="caller", id=root, group=caller_group, x=12, worker_group=worker_group
    )
    result = ts.result(caller)
    assert result["square"] == 144
    assert result["worker_pid"] == worker.popen.pid
    assert result["caller_pid"] == caller.popen.pid

    records = lineage(ts.server, root)
    assert set(records) == {root, f"{root}:0"}
    assert_all_resolved(records)
    child = records[f"{root}:0"]
    assert child["tags"]["resonate:target"] == f"poll://any@{worker_group}"
    assert decode(child) == {"value": 144, "pid": worker.popen.pid}
    tasks = tasks_of(ts.server, set(records))
    assert set(tasks) == {root, f"{root}:0"}
    assert_tasks_fulfilled(tasks)


def test_fan_out_a_hundred_children(ts: Programs) -> None:
    root, group, n = unique("ts-fanout"), unique("g"), 100
    helper = ts.node("ts_fanout.mjs", role="helper", group=group)
    ts.ready(helper)
    proc = ts.node("ts_fanout.mjs", role="main", id=root, group=group, n=n)
    assert ts.result(proc) == {"count": n, "sum": sum(i**3 for i in range(n))}

    records = lineage(ts.server, root)
    assert set(records) == {root} | {f"{root}:{i}" for i in range(n)}
    assert_all_resolved(records)
    assert sorted(decode(p) for p in children(records, root).values()) == [i**3 for i in range(n)]
    tasks = tasks_of(ts.server, set(records))
    assert set(tasks) == set(records)
    assert_tasks_fulfilled(tasks)


def test_detached_child_and_human_in_the_loop(ts: Programs, tmp_path: Path) -> None:
    root, group = unique("ts-approval"), unique("g")
    ledger = tmp_path / "ledger"
    proc = ts.node("ts_approval.mjs", id=root, group=group, order="order-7", ledger=str(ledger))

    def waiting() -> str | None:
        # TypeScript marks ctx.promise() only with scope=global: no target, no timer.
        found = [
            pid
            for pid, p in lineage(ts.server, root).items()
            if pid != root
            and p["state"] == "pending"
            and p["tags"].get("resonate:scope") == "global"
            and "resonate:target" not in p["tags"]
            and "resonate:timer" not in p["tags"]
        ]
        return found[0] if found else None

    human = poll(waiting, "the workflow to wait on its human promise", ts.tails)
    decision = {"approved": True, "by": "alice"}
    settled = ts.server.ok("promise.settle", id=human, state="resolved", value=encode(decision))
    assert settled["promise"]["state"] == "resolved"

    result = ts.result(proc)
    assert result["outcome"] == "order-7 shipped, approved by alice"
    audits = result["audits"]
    assert len(set(audits)) == 2
    assert all(audit.startswith(f"{root}:d") for audit in audits)
    assert result["audit_results"] == ["finance audited order-7", "legal audited order-7"]
    assert sorted(ledger.read_text().splitlines()) == ["finance order-7", "legal order-7"]

    records = lineage(ts.server, root)
    assert_all_resolved(records)
    assert decode(records[human]) == decision
    for audit in audits:
        assert records[audit]["tags"]["resonate:target"] == f"poll://any@{group}"
    tasks = tasks_of(ts.server, set(records))
    assert set(tasks) == {root, *audits}
    assert_tasks_fulfilled(tasks)


def test_schedule_created_through_the_sdk_fires(ts: Programs, tmp_path: Path) -> None:
    sched, group = unique("ts-every-second"), unique("g")
    ledger = tmp_path / "ledger"
    proc = ts.node(
        "ts_schedule.mjs",
        id=sched,
        group=group,
        cron="* * * * * *",
        label="tick",
        ledger=str(ledger),
    )
    fired = poll(
        lambda: resolved_occurrences(ts.server, sched, 2), "two resolved occurrences", ts.tails
    )
    ts.finish(proc)  # SIGTERM: the program deletes the schedule through the SDK
    assert ts.result(proc) == {"deleted": sched}
    status, _ = ts.server.call("schedule.get", id=sched)
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
    tasks = tasks_of(ts.server, set(fired))
    assert set(tasks) == set(fired)
    assert_tasks_fulfilled(tasks)


def test_recovery_after_sigkill_settles_each_step_once(ts: Programs, tmp_path: Path) -> None:
    root, group = unique("ts-recovery"), unique("g")
    ledger, gate, holding = tmp_path / "ledger", tmp_path / "gate", tmp_path / "holding"
    steps, hold = 5, 2
    cfg: dict[str, Any] = {"group": group, "ttl_ms": TTL_MS, "gate": str(gate)}
    cfg.update(ledger=str(ledger), holding=str(holding))
    first_pid, second_pid = unique("first"), unique("second")
    starter = {"role": "first", "id": root, "steps": steps, "hold": hold, "pid": first_pid}
    first = ts.node("ts_recovery.mjs", **starter, **cfg)
    # Step `hold` runs for well over two lease lifetimes: heartbeats keep the lease meanwhile.
    poll(lambda: len(lines(holding)) >= HOLD_LINES, f"step {hold} to hold on", ts.tails)
    held = tasks_of(ts.server, {root})[root]
    assert (held["state"], held["pid"], held["version"]) == ("acquired", first_pid, 1)

    first.kill_hard()  # SIGKILL mid-workflow: the steps before `hold` are settled, `hold` is not
    assert [step for step, _ in executions(ledger)] == list(range(hold + 1))
    gate.touch()
    second = ts.node("ts_recovery.mjs", role="second", pid=second_pid, **cfg)
    settled = wait_settled(ts.server, root, ts)
    assert settled["state"] == "resolved"
    ts.finish(second)

    runs: dict[int, list[str]] = {}
    for step, token in executions(ledger):
        runs.setdefault(step, []).append(token)
    # Settled steps were never run again; only the step cut off by the kill ran twice.
    assert {step: len(tokens) for step, tokens in runs.items()} == {
        i: 2 if i == hold else 1 for i in range(steps)
    }
    assert runs[hold][0].startswith(f"{first.popen.pid}-")
    assert runs[hold][1].startswith(f"{second.popen.pid}-")

    records = lineage(ts.server, root)
    assert_all_resolved(records)
    values = [decode(records[f"{root}:{i + 0}"]) for i in range(steps)]
    # Each step's promise holds what its first (and only) settle wrote.
    assert values == [tokens[-1] for _, tokens in sorted(runs.items())]
    assert decode(records[root]) == values
    tasks = tasks_of(ts.server, set(records))
    assert set(tasks) == {root}
    assert_tasks_fulfilled(tasks)
    assert tasks[root]["version"] == 2  # the lease expired once; the second worker took it


# --- the canonical workloads of resonate-specification work/ts ---------------------------------


def w3_value(n: int, m: int) -> int:
    return m**n


def w3_size(n: int, m: int) -> int:
    """Invocations in a full m-ary tree of depth n: one promise each."""
    return sum(m**d for d in range(n + 1))


def w3_remote(n: int, m: int) -> int:
    """The root plus every level reached by an rpc edge (made by an odd parent): one task each."""
    return 1 + sum(m**d for d in range(1, n + 1) if (n - d + 1) % 2 == 1)


def test_w3_closed_forms_match_the_specification_table() -> None:
    # resonate-specification work/ts/README.md: (4, 2) -> 16, 31, 21 and (3, 3) -> 27, 40, 31.
    assert (w3_value(4, 2), w3_size(4, 2), w3_remote(4, 2)) == (16, 31, 21)
    assert (w3_value(3, 3), w3_size(3, 3), w3_remote(3, 3)) == (27, 40, 31)


def run_workload(ts: Programs, program: str, root: str, **cfg: Any) -> tuple[Any, Any, Any]:
    proc = ts.node(program, id=root, group=unique("g"), **cfg)
    result = ts.result(proc)
    assert result["again"] == result["result"]  # resonate.get reads the same durable value
    records = lineage(ts.server, root)
    assert_all_resolved(records)  # nothing left pending
    tasks = tasks_of(ts.server, set(records))
    assert_tasks_fulfilled(tasks)
    return result["result"], records, tasks


@pytest.mark.parametrize("via", ["run", "rpc"])
def test_w1_sequential_local_calls(ts: Programs, via: str) -> None:
    root, n = unique("w1"), 3
    result, records, tasks = run_workload(ts, "ts_w1.mjs", root, n=n, via=via)
    assert result == n
    # n + 1 promises; the children are local (no target), so the root is the only task.
    assert len(records) == n + 1
    assert set(tasks) == {root}
    for child in children(records, root).values():
        assert child["tags"]["resonate:scope"] == "local"
        assert child["tags"]["resonate:branch"] == root
        assert "resonate:target" not in child["tags"]


@pytest.mark.parametrize("via", ["run", "rpc"])
def test_w2_sequential_remote_calls(ts: Programs, via: str) -> None:
    root, n = unique("w2"), 3
    result, records, tasks = run_workload(ts, "ts_w2.mjs", root, n=n, via=via)
    assert result == n
    # n + 1 promises and n + 1 tasks: every child is dispatched.
    assert len(records) == n + 1
    assert set(tasks) == set(records)
    for child_id, child in children(records, root).items():
        assert child["tags"]["resonate:scope"] == "global"
        assert child["tags"]["resonate:branch"] == child_id
        assert child["tags"]["resonate:parent"] == root
    # foo suspended on each child and was resumed: acquired once per entry.
    assert tasks[root]["version"] >= 2


@pytest.mark.parametrize(("n", "m", "via"), [(4, 2, "run"), (3, 3, "rpc")])
def test_w3_alternating_tree(ts: Programs, n: int, m: int, via: str) -> None:
    root = unique("w3")
    result, records, tasks = run_workload(ts, "ts_w3.mjs", root, n=n, m=m, via=via)
    assert result == w3_value(n, m)
    assert len(records) == w3_size(n, m)
    assert len(tasks) == w3_remote(n, m)
    # A task exists exactly for the promises that carry a target.
    assert set(tasks) == {pid for pid, p in records.items() if "resonate:target" in p["tags"]}
