"""The TypeScript SDK (@resonatehq/sdk 0.11.5), unmodified, against both shapes of the server: the
canonical workloads of resonate-specification work/ts (W1, W2, W3). What both SDKs run is
tests/e2e/test_sdks.py.

Each test runs a real SDK program (``programs/ts_w*.mjs``, Node with a ``Promise.withResolvers``
polyfill) as a separate process, checks the result it prints and then reads the durable state
back through ``POST /``. The TypeScript SDK numbers children from 0 (``root:0``, ``root:1``).
"""

from __future__ import annotations

from typing import Any

import pytest

from .sdk import (
    Programs,
    assert_all_resolved,
    assert_tasks_fulfilled,
    children,
    lineage,
    tasks_of,
    unique,
)

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
