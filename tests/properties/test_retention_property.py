"""Retention never deletes part of a tree, nor anything something still counts on: random
histories of trees (roots with and without tasks, children of their origin, listeners, callbacks
between trees, settlements, the steps' drains, deliveries) pruned at random instants, checked
after every prune against what the database held just before it. On SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox.models import Message
from promises.models import Callback, Listener, Promise, PromiseState
from resonate_project.engine.retention import Policy, prune
from resonate_project.engine.steps import run_due
from tasks_app.models import Task, TaskState
from tests.support.factories import Api

WINDOW = 1_000
TARGET = "poll://any@prop"

op = st.one_of(
    st.tuples(st.just("root"), st.booleans(), st.integers(1_000, 100_000)),
    st.tuples(st.just("child"), st.integers(0, 7), st.integers(1_000, 100_000)),
    st.tuples(st.just("settle"), st.integers(0, 40), st.integers(0, 20_000)),
    st.tuples(st.just("listen"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("callback"), st.integers(0, 40), st.integers(0, 7)),
    st.tuples(st.just("run"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("drain"), st.just(0), st.just(0)),
    st.tuples(st.just("deliver"), st.integers(0, 40), st.just(0)),
    st.tuples(st.just("prune"), st.integers(0, 30_000), st.just(0)),
)


class History:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.now = 1_000
        self.roots: list[str] = []
        self.ids: list[str] = []
        self.pruned = 0  # trees the prunes deleted

    def tick(self, by: int) -> int:
        self.now += by
        return self.now

    def create(self, pid: str, origin: str, target: bool, timeout: int) -> None:
        tags = {"resonate:origin": origin, "resonate:scope": "global"}
        if target:
            tags["resonate:target"] = TARGET
        res = self.api(
            "promise.create",
            now=self.tick(1),
            id=pid,
            timeoutAt=self.now + timeout,
            param={},
            tags=tags,
        )
        assert res.status in (200, 201), res.data
        self.ids.append(pid)

    def pick(self, i: int) -> str | None:
        return self.ids[i % len(self.ids)] if self.ids else None

    def apply(self, kind: str, a: Any, b: Any) -> None:
        pid = self.pick(a) if isinstance(a, int) and not isinstance(a, bool) else None
        if kind == "root":
            root = f"r{len(self.roots)}"
            self.roots.append(root)
            self.create(root, root, a, b)
        elif kind == "child" and self.roots:
            root = self.roots[a % len(self.roots)]
            self.create(f"{root}:{len(self.ids)}", root, False, b)
        elif kind == "settle" and pid:
            self.api(
                "promise.settle", now=self.tick(b), id=pid, state="resolved", value={"data": "v"}
            )
        elif kind == "listen" and pid:
            address = f"poll://uni@prop/{pid}"
            self.api("promise.register_listener", now=self.tick(1), awaited=pid, address=address)
        elif kind == "callback" and pid and self.roots:
            awaiter = self.roots[b % len(self.roots)]
            self.api("promise.register_callback", now=self.tick(1), awaited=pid, awaiter=awaiter)
        elif kind == "run" and pid:
            task = Task.objects.filter(promise_id=pid).first()
            if task is not None and task.state == TaskState.PENDING:
                res = self.api(
                    "task.acquire",
                    now=self.tick(1),
                    id=pid,
                    version=task.version,
                    pid="w",
                    ttl=10**9,
                )
                if res.status == 200:
                    action = {
                        "kind": "promise.settle",
                        "head": {},
                        "data": {"id": pid, "state": "resolved", "value": {}},
                    }
                    self.api(
                        "task.fulfill",
                        now=self.tick(1),
                        id=pid,
                        version=res.data["task"]["version"],
                        action=action,
                    )
        elif kind == "drain":
            run_due(self.tick(1), 100)
        elif kind == "deliver" and pid:
            Message.objects.filter(key__startswith=f"{pid}:").delete()
        elif kind == "prune":
            self.prune(self.tick(a))

    def prune(self, now: int) -> None:
        before = snapshot()
        prune(now, Policy(promises_ms=WINDOW), batch=3)
        after = snapshot()
        gone = set(before["promises"]) - set(after["promises"])
        trees: dict[str, set[str]] = defaultdict(set)
        for pid, row in before["promises"].items():
            trees[row["origin"] or pid].add(pid)
        for pid in gone:
            row = before["promises"][pid]
            tree = trees[row["origin"] or pid]
            # Whole trees only.
            assert tree <= gone, (pid, tree - gone)
            for member in tree:
                m = before["promises"][member]
                at = m["timeout_at"] if m["state"] == PromiseState.PENDING else m["settled_at"]
                assert at is not None, (member, m)
                assert at < now - WINDOW, (member, m, now)
                assert m["task"] in (None, TaskState.FULFILLED), (member, m)
        # Nothing anything still counted on went: every callback, listener and unblock stays.
        assert after["callbacks"] == before["callbacks"]
        assert after["listeners"] == before["listeners"]
        assert after["unblocks"] == before["unblocks"]
        for awaited, awaiter in before["callbacks"]:
            assert awaited not in gone
            assert awaiter not in gone
        # And every tree nothing counts on went.
        held = {a for a, _ in before["callbacks"]} | {w for _, w in before["callbacks"]}
        held |= {awaited for awaited, _ in before["listeners"]}
        held |= {key.split(":notify:")[0] for key in before["unblocks"]}
        for key, tree in trees.items():
            rows = [before["promises"][m] for m in tree]
            over = all(
                (r["timeout_at"] if r["state"] == PromiseState.PENDING else r["settled_at"])
                < now - WINDOW
                for r in rows
            )
            done = all(r["task"] in (None, TaskState.FULFILLED) for r in rows)
            if over and done and not tree & held:
                assert tree <= gone, (key, tree - gone, rows)
                self.pruned += 1


def snapshot() -> dict[str, Any]:
    tasks = dict(Task.objects.values_list("promise_id", "state"))
    promises = {
        pid: {
            "state": state,
            "settled_at": settled_at,
            "timeout_at": timeout_at,
            "origin": (tags or {}).get("resonate:origin"),
            "task": tasks.get(pid),
        }
        for pid, state, settled_at, timeout_at, tags in Promise.objects.values_list(
            "id", "state", "settled_at", "timeout_at", "tags"
        )
    }
    return {
        "promises": promises,
        "callbacks": set(Callback.objects.values_list("awaited_id", "awaiter_id")),
        "listeners": set(Listener.objects.values_list("awaited_id", "address")),
        "unblocks": set(Message.objects.filter(kind="unblock").values_list("key", flat=True)),
    }


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(op, min_size=5, max_size=40))
def test_retention_deletes_whole_trees_nothing_counts_on(api: Api, ops: list[Any]) -> None:
    for model in (Message, Callback, Listener, Task, Promise):
        model.objects.all().delete()
    history = History(api)
    for kind, a, b in ops:
        history.apply(kind, a, b)
    history.prune(history.tick(100_000))  # everything past every window


def test_a_known_history_prunes_the_free_trees_and_keeps_the_held_ones(api: Api) -> None:
    """The checks above, on a history where both happen: r0 (with a task, run to the end) and r1
    go; r2 keeps a listener whose unblock was never delivered; r3 has a child still pending."""
    history = History(api)
    for step in [
        ("root", True, 5_000),
        ("root", False, 5_000),
        ("root", False, 5_000),
        ("root", False, 500_000),
        ("child", 0, 5_000),
        ("child", 3, 900_000),
        ("run", 0, 0),
        ("settle", 1, 0),
        ("settle", 4, 0),
        ("listen", 2, 0),
        ("settle", 2, 0),
        ("settle", 3, 0),
        ("drain", 0, 0),
    ]:
        history.apply(*step)
    history.prune(history.tick(100_000))
    assert history.pruned == 2
    assert set(Promise.objects.values_list("id", flat=True)) == {"r2", "r3", "r3:5"}
