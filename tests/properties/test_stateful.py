"""Random request sequences and internal steps over a small id pool, with the spec's state
properties (digest §8.7) checked after every step and every response checked against the
projection of what is stored (C8).

The clock only moves forward. Expected statuses come from the spec's evaluation order (§4.0)
computed on the stored state before each request, so a wrong guard order shows as a status
mismatch rather than only as a broken invariant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.core.protocol import Response
from resonate_project.edges.envelope import call
from resonate_project.engine import steps
from resonate_project.engine.task_transitions import release_backoff_ms
from schedules.models import Schedule
from tasks_app.models import Task
from tests.conftest import FAR

IDS = ("a", "b", "c", "d")
PIDS = ("w1", "w2")
TTLS = (0, 40, 700, 9000)
RETRY_MS = 5000
SETTABLE = ("resolved", "rejected", "rejected_canceled")
TARGET, TIMER, EXTERNAL, SCOPE, DELAY = (
    "resonate:target",
    "resonate:timer",
    "resonate:external",
    "resonate:scope",
    "resonate:delay",
)

# name -> tags (a "delayed" promise gets its resonate:delay filled in relative to now)
TAG_KINDS: dict[str, dict[str, str]] = {
    "external": {EXTERNAL: "true"},
    "internal": {},
    "local": {SCOPE: "local"},
    "global": {SCOPE: "global"},
    "timer": {TIMER: "true"},
    "target": {TARGET: "poll://any@g"},
    "target_group": {TARGET: "w1"},
    "target_empty": {TARGET: ""},
    "timer_target": {TIMER: "true", TARGET: "poll://any@g"},
    "delayed": {TARGET: "poll://any@g"},
}
TARGETED_KINDS = ("target", "target_group", "delayed", "target_empty", "timer_target")
OFFSETS = (None, 20_000, 3000, 400, 30, 1, 0, -300)  # deadline - now; None = FAR
ADDRESSES = ("poll://any@g", "http://h.example/x", "poll://nowhere")
PROMISE_STATES = ("pending", "resolved", "rejected", "rejected_canceled", "rejected_timedout")
TASK_STATES = ("pending", "acquired", "suspended", "halted", "fulfilled")
VERSION_CHOICES = ("current", "current", "current", "previous", "next")

tag_kind = st.sampled_from(list(TAG_KINDS))
targeted_kind = st.sampled_from(TARGETED_KINDS)
ids = st.sampled_from(IDS)
offsets = st.sampled_from(OFFSETS)
seed_offsets = st.sampled_from([None, None, None, 20_000, 3000, 400])
versions = st.sampled_from(VERSION_CHOICES)
picks = st.integers(min_value=0, max_value=9)  # resolved against the store by ``pick``
pids = st.sampled_from(PIDS)
ttls = st.sampled_from(TTLS)

STEPS: dict[str, Callable[[int, int], int]] = {
    "promise_timeouts": steps.promise_timeouts,
    "run_due": steps.run_due,
    "lease_expiry": steps.lease_expiry,
    "retry_dispatch": steps.retry_dispatch,
    "callback_drain": steps.callback_drain,
    "listener_drain": steps.listener_drain,
}

# §5.8 task edges (pre -> allowed post states) for one step.
TASK_EDGES = {
    "pending": {"pending", "acquired", "halted", "fulfilled"},
    "acquired": {"pending", "acquired", "suspended", "halted", "fulfilled"},
    "suspended": {"pending", "suspended", "halted", "fulfilled"},
    "halted": {"pending", "halted", "fulfilled"},
    "fulfilled": {"fulfilled"},
}


# --- the spec's views, computed independently of the server's helpers ------------------------


def is_timer(tags: dict[str, str]) -> bool:
    return tags.get(TIMER) == "true"


def is_external(tags: dict[str, str]) -> bool:
    # Spec rule plus the brief's resonate:scope=global deviation.
    return (
        tags.get(EXTERNAL) == "true"
        or TARGET in tags
        or is_timer(tags)
        or tags.get(SCOPE) == "global"
    )


def live(p: dict[str, Any], now: int) -> bool:
    return bool(p["state"] == "pending" and now < p["timeout_at"])


def projected(p: dict[str, Any], now: int) -> tuple[str, int | None]:
    if p["state"] == "pending" and p["timeout_at"] <= now:
        return ("resolved" if is_timer(p["tags"]) else "rejected_timedout"), p["timeout_at"]
    return p["state"], p["settled_at"]


def value_of(headers: Any, data: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if headers is not None:
        out["headers"] = headers
    if data is not None:
        out["data"] = data
    return out


def expected_promise_record(p: dict[str, Any], now: int) -> dict[str, Any]:
    state, settled_at = projected(p, now)
    rec: dict[str, Any] = {
        "id": p["id"],
        "state": state,
        "param": value_of(p["param_headers"], p["param_data"]),
        "value": value_of(p["value_headers"], p["value_data"]),
        "tags": p["tags"],
        "timeoutAt": p["timeout_at"],
        "createdAt": p["created_at"],
    }
    if settled_at is not None:
        rec["settledAt"] = settled_at
    return rec


def viewed_task_state(t: dict[str, Any], p: dict[str, Any], now: int) -> str:
    if t["state"] != "fulfilled" and not live(p, now):
        return "fulfilled"
    return str(t["state"])


def expected_task_record(t: dict[str, Any], p: dict[str, Any], now: int) -> dict[str, Any]:
    state = viewed_task_state(t, p, now)
    if state == "fulfilled":
        return {"id": p["id"], "state": "fulfilled", "version": t["version"], "resumes": 0}
    rec: dict[str, Any] = {
        "id": p["id"],
        "state": state,
        "version": t["version"],
        "resumes": len(t["resumes"]),
    }
    if t["ttl"] is not None:
        rec["ttl"] = t["ttl"]
    if t["pid"] is not None:
        rec["pid"] = t["pid"]
    return rec


def deliverable(address: str) -> bool:
    return address.startswith(("http://", "https://")) or (
        address.startswith("poll://") and "@" in address
    )


@dataclass
class Snap:
    promises: dict[str, dict[str, Any]]
    tasks: dict[str, dict[str, Any]]
    callbacks: set[tuple[str, str]]
    listeners: set[tuple[str, str]]
    messages: dict[str, dict[str, Any]]


def snapshot() -> Snap:
    return Snap(
        promises={p["id"]: dict(p) for p in Promise.objects.values()},
        tasks={t["promise_id"]: dict(t) for t in Task.objects.values()},
        callbacks=set(Callback.objects.values_list("awaited_id", "awaiter_id")),
        listeners=set(Listener.objects.values_list("awaited_id", "address")),
        messages={m["key"]: dict(m) for m in Message.objects.values()},
    )


def clear_database() -> None:
    for model in (Message, Callback, Listener, Schedule, Task, Promise):
        model.objects.all().delete()


class ResonateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        clear_database()  # each example starts from an empty store
        self.now = 1_000
        self.prev = snapshot()
        self.frozen_stored: dict[str, tuple[Any, ...]] = {}  # settled rows (state, value, at)
        self.frozen_view: dict[str, tuple[Any, ...]] = {}  # projected settlement, once seen
        self.claims: set[tuple[str, int]] = set()  # (task, version) granted by a 200

    # --- helpers ---------------------------------------------------------------------------

    def request(self, kind: str, **data: Any) -> Response:
        res = call(kind, data, self.now)
        assert res.status in {200, 300, 400, 404, 409, 422}, (kind, data, res)
        if res.status >= 400:
            assert isinstance(res.data, str), (kind, res)
        else:
            assert isinstance(res.data, dict), (kind, res)
            self.check_records(res.data)
        return res

    def check_records(self, data: Any) -> None:
        """C8: every promise and task record in a response is the projection, at the request's
        ``now``, of what is stored after it (single-threaded, so nothing moved in between)."""
        if isinstance(data, list):
            for item in data:
                self.check_records(item)
            return
        if not isinstance(data, dict):
            return
        if {"id", "state", "timeoutAt", "createdAt"} <= data.keys():
            row = dict(Promise.objects.values().get(id=data["id"]))
            assert data == expected_promise_record(row, self.now), data
            assert data["state"] != "pending" or data["timeoutAt"] > self.now, data
            if data["state"] != "pending":
                seen = (data["state"], data["value"], data["settledAt"])
                assert self.frozen_view.setdefault(data["id"], seen) == seen, data
            return
        if {"id", "state", "version", "resumes"} <= data.keys():
            t = dict(Task.objects.values().get(promise_id=data["id"]))
            p = dict(Promise.objects.values().get(id=data["id"]))
            assert data == expected_task_record(t, p, self.now), data
            return
        for value in data.values():
            self.check_records(value)

    def promise(self, pid: str) -> dict[str, Any] | None:
        row = Promise.objects.values().filter(id=pid).first()
        return None if row is None else dict(row)

    def task(self, tid: str) -> dict[str, Any] | None:
        row = Task.objects.values().filter(promise_id=tid).first()
        return None if row is None else dict(row)

    def pick(self, n: int, prefer: str | None = None, avoid: str | None = None) -> str:
        """An id chosen against the current store: mostly a task in the state the rule needs
        (else any task), sometimes any id of the pool, so refusals stay reachable."""
        pool = [i for i in IDS if i != avoid] or list(IDS)
        if n >= 8:
            return pool[n % len(pool)]
        tasks = Task.objects.exclude(promise_id=avoid).order_by("promise_id")
        preferred = [t.promise_id for t in tasks if prefer is None or t.state == prefer]
        candidates = preferred or [t.promise_id for t in tasks] or pool
        return candidates[n % len(candidates)]

    def version_for(self, tid: str, choice: str) -> int:
        t = self.task(tid)
        current = t["version"] if t else 0
        return {"current": current, "previous": max(current - 1, 0), "next": current + 1}[choice]

    def deadline(self, offset: int | None) -> int:
        return FAR if offset is None else max(self.now + offset, 0)

    def tags_for(self, kind: str, branch: bool) -> dict[str, str]:
        tags = dict(TAG_KINDS[kind])
        if kind == "delayed":
            tags[DELAY] = str(self.now + 2500)
        if branch:
            tags["resonate:branch"] = "root"
        return tags

    def fence_block(self, tid: str, version: int, expected: str) -> int:
        """§4.0: task absent 404 → viewed state wrong 409 → promise not live 409 → version 409."""
        t, p = self.task(tid), self.promise(tid)
        if t is None or p is None:
            return 404
        if viewed_task_state(t, p, self.now) != expected:
            return 409
        if not live(p, self.now):
            return 409
        if t["version"] != version:
            return 409
        return 200

    def claimed(self, res: Response) -> None:
        task = res.data["task"]
        if task["state"] == "acquired":
            claim = (task["id"], task["version"])
            assert claim not in self.claims, f"C10: version {claim} granted twice"
            self.claims.add(claim)

    # --- time and internal steps -------------------------------------------------------------

    @initialize(
        seeds=st.lists(
            st.sampled_from(
                ["acquired", "target", "external", "acquired", "target", "timer", None]
            ),
            min_size=len(IDS),
            max_size=len(IDS),
        ),
        offsets=st.lists(seed_offsets, min_size=len(IDS), max_size=len(IDS)),
    )
    def seed(self, seeds: list[str | None], offsets: list[int | None]) -> None:
        """Start most examples with a few objects, so short runs reach the interesting paths."""
        assert Promise.objects.count() == 0
        for pid, kind, offset in zip(IDS, seeds, offsets, strict=True):
            if kind == "acquired":
                self.task_create(pid, "target", offset, PIDS[0], 9000, True)
            elif kind is not None:
                self.promise_create(pid, kind, offset, True)

    @rule(dt=st.sampled_from([1, 25, 300, 2000, 6000]))
    def advance(self, dt: int) -> None:
        self.now += dt

    @rule(step=st.sampled_from(list(STEPS)), limit=st.sampled_from([1, 100]))
    def internal_step(self, step: str, limit: int) -> None:
        STEPS[step](self.now, limit)

    # --- promises ---------------------------------------------------------------------------

    @rule(pid=ids, kind=tag_kind, offset=offsets, branch=st.booleans())
    def promise_create(self, pid: str, kind: str, offset: int | None, branch: bool) -> None:
        timeout_at = self.deadline(offset)
        before = self.promise(pid)
        res = self.request(
            "promise.create",
            id=pid,
            timeoutAt=timeout_at,
            param={"data": "cGFyYW0=", "headers": {"h": pid}},
            tags=self.tags_for(kind, branch),
        )
        assert res.status == 200  # timer+target is accepted (brief)
        if before is not None:
            assert res.data["promise"] == expected_promise_record(before, self.now)

    @rule(n=picks, state=st.sampled_from([*SETTABLE, "pending", "rejected_timedout"]))
    def promise_settle(self, n: int, state: str) -> None:
        pid = IDS[n % len(IDS)] if n % 2 else self.pick(n)
        p = self.promise(pid)
        expected = 400 if state not in SETTABLE else 404 if p is None else 200
        res = self.request("promise.settle", id=pid, state=state, value={"data": "dg=="})
        assert res.status == expected, res
        if expected == 200:
            assert p is not None
            record = res.data["promise"]
            if live(p, self.now):
                assert (record["state"], record["settledAt"]) == (state, self.now)
            else:
                assert record == expected_promise_record(p, self.now)

    @rule(awaited=ids, n=picks)
    def register_callback(self, awaited: str, n: int) -> None:
        awaiter = self.pick(n, "acquired", avoid=awaited if n % 3 else None)
        a, w = self.promise(awaited), self.promise(awaiter)
        if awaited == awaiter:
            expected = 400
        elif a is None:
            expected = 404
        elif w is None or TARGET not in w["tags"] or not is_external(a["tags"]):
            expected = 422
        else:
            expected = 200
        res = self.request("promise.register_callback", awaited=awaited, awaiter=awaiter)
        assert res.status == expected, res
        if expected == 200:
            assert a is not None
            assert w is not None
            registered = Callback.objects.filter(awaited_id=awaited, awaiter_id=awaiter).exists()
            if live(a, self.now) and live(w, self.now):
                assert registered
            elif (awaited, awaiter) not in self.prev.callbacks:
                assert not registered, "C11: a callback registered on a settled promise"

    @rule(awaited=ids, address=st.sampled_from(ADDRESSES))
    def register_listener(self, awaited: str, address: str) -> None:
        a = self.promise(awaited)
        if not deliverable(address):
            expected = 400
        elif a is None:
            expected = 404
        elif not is_external(a["tags"]):
            expected = 422
        else:
            expected = 200
        res = self.request("promise.register_listener", awaited=awaited, address=address)
        assert res.status == expected, res
        if expected == 200:
            assert a is not None
            registered = Listener.objects.filter(awaited_id=awaited, address=address).exists()
            if live(a, self.now):
                assert registered
            elif (awaited, address) not in self.prev.listeners:
                assert not registered, "C11: a listener registered on a settled promise"

    @rule(
        kind=st.sampled_from(["promise.get", "task.get", "promise.search", "task.search"]),
        pid=ids,
        state=st.sampled_from([None, "pending", "resolved", "rejected_timedout", "acquired"]),
    )
    def read(self, kind: str, pid: str, state: str | None) -> None:
        """Reads write nothing (-p) and searches filter on the projected/viewed state."""
        before = snapshot()
        if kind in ("promise.get", "task.get"):
            exists = (self.promise(pid) if kind == "promise.get" else self.task(pid)) is not None
            res = self.request(kind, id=pid)
            assert res.status == (200 if exists else 404)
        else:
            data: dict[str, Any] = {} if state is None else {"state": state}
            res = self.request(kind, **data)
            states = PROMISE_STATES if kind == "promise.search" else TASK_STATES
            valid = state is None or state in states
            assert res.status == (200 if valid else 400), res
            if valid:
                self.check_search(kind, state, res.data)
        after = snapshot()
        assert (after.promises, after.tasks, after.messages) == (
            before.promises,
            before.tasks,
            before.messages,
        ), f"{kind} wrote to the store"
        assert (after.callbacks, after.listeners) == (before.callbacks, before.listeners)

    def check_search(self, kind: str, state: str | None, data: dict[str, Any]) -> None:
        assert "cursor" not in data  # fewer rows than the default limit: the last page
        snap = snapshot()
        if kind == "promise.search":
            got = [r["id"] for r in data["promises"]]
            want = [
                pid
                for pid, p in sorted(snap.promises.items())
                if state is None or projected(p, self.now)[0] == state
            ]
        else:
            got = [r["id"] for r in data["tasks"]]
            want = [
                tid
                for tid, t in sorted(snap.tasks.items())
                if state is None or viewed_task_state(t, snap.promises[tid], self.now) == state
            ]
        assert got == want, (kind, state, got, want)

    # --- tasks ------------------------------------------------------------------------------

    @rule(
        pid=ids,
        kind=st.one_of(targeted_kind, targeted_kind, tag_kind),
        offset=offsets,
        worker=pids,
        ttl=ttls,
        branch=st.booleans(),
    )
    def task_create(
        self, pid: str, kind: str, offset: int | None, worker: str, ttl: int, branch: bool
    ) -> None:
        tags = self.tags_for(kind, branch)
        p, t = self.promise(pid), self.task(pid)
        if TARGET not in tags or is_timer(tags):
            expected = 400
        elif p is None:
            expected = 200
        elif TARGET not in p["tags"]:
            expected = 422
        elif t is None:
            expected = 409
        else:
            expected = 200 if viewed_task_state(t, p, self.now) in ("fulfilled", "pending") else 409
        action = {
            "kind": "promise.create",
            "head": {},
            "data": {"id": pid, "timeoutAt": self.deadline(offset), "tags": tags},
        }
        res = self.request("task.create", pid=worker, ttl=ttl, action=action)
        assert res.status == expected, res
        if res.status == 200:
            self.claimed(res)
            if res.data["task"]["state"] == "acquired":
                assert res.data["task"]["pid"] == worker
                assert res.data["task"]["ttl"] == ttl

    @rule(n=picks, choice=versions, worker=pids, ttl=ttls)
    def task_acquire(self, n: int, choice: str, worker: str, ttl: int) -> None:
        tid = self.pick(n, "pending")
        version = self.version_for(tid, choice)
        expected = self.fence_block(tid, version, "pending")
        res = self.request("task.acquire", id=tid, version=version, pid=worker, ttl=ttl)
        assert res.status == expected, res
        if expected == 200:
            self.claimed(res)
            task = Task.objects.get(promise_id=tid)
            assert (task.state, task.version, task.pid, task.ttl) == (
                "acquired",
                version + 1,
                worker,
                ttl,
            )
            assert task.expires_at == self.now + ttl

    @rule(
        n=picks,
        choice=versions,
        child_n=picks,
        create=st.booleans(),
        kind=tag_kind,
        offset=offsets,
        state=st.sampled_from([*SETTABLE, "pending"]),
    )
    def task_fence(
        self,
        n: int,
        choice: str,
        child_n: int,
        create: bool,
        kind: str,
        offset: int | None,
        state: str,
    ) -> None:
        tid = self.pick(n, "acquired")
        child = IDS[child_n % len(IDS)] if child_n >= 8 else self.pick(child_n + 8, avoid=tid)
        version = self.version_for(tid, choice)
        if create:
            action = {
                "kind": "promise.create",
                "head": {"corrId": "inner"},
                "data": {
                    "id": child,
                    "timeoutAt": self.deadline(offset),
                    "tags": self.tags_for(kind, True),
                },
            }
        else:
            action = {
                "kind": "promise.settle",
                "head": {"corrId": "inner"},
                "data": {"id": child, "state": state, "value": {"data": "Zg=="}},
            }
        c = self.promise(child)
        expected = 400 if child == tid else self.fence_block(tid, version, "acquired")
        version_before = (self.task(tid) or {}).get("version")
        res = self.request("task.fence", id=tid, version=version, action=action)
        assert res.status == expected, res
        if expected == 200:
            inner = res.data["action"]
            assert inner["kind"] == action["kind"]
            assert inner["head"]["corrId"] == "inner"
            if create:
                inner_expected = 200
            elif state not in SETTABLE:
                inner_expected = 400
            else:
                inner_expected = 404 if c is None else 200
            assert inner["head"]["status"] == inner_expected, inner
            assert self.task(tid)["version"] == version_before  # type: ignore[index]

    @rule(
        n=picks,
        choice=versions,
        awaited=st.lists(ids, min_size=1, max_size=3, unique=True),
        mutation=st.sampled_from(["none"] * 6 + ["self", "dup", "empty"]),
    )
    def task_suspend(self, n: int, choice: str, awaited: list[str], mutation: str) -> None:
        tid = self.pick(n, "acquired")
        awaited = [a for a in awaited if a != tid]
        if mutation == "self":
            awaited.append(tid)
        elif mutation == "dup" and awaited:
            awaited.append(awaited[0])
        elif mutation == "empty":
            awaited = []
        version = self.version_for(tid, choice)
        if not awaited or tid in awaited or len(set(awaited)) != len(awaited):
            expected = 400
        else:
            expected = self.fence_block(tid, version, "acquired")
            if expected == 200:
                rows = [self.promise(a) for a in awaited]
                if any(r is None or not is_external(r["tags"]) for r in rows):
                    expected = 422
                elif any(not live(r, self.now) for r in rows if r is not None):
                    expected = 300
        actions = [
            {
                "kind": "promise.register_callback",
                "head": {},
                "data": {"awaited": a, "awaiter": tid},
            }
            for a in awaited
        ]
        res = self.request("task.suspend", id=tid, version=version, actions=actions)
        assert res.status == expected, res
        task = self.task(tid)
        if expected == 300:
            assert task is not None
            assert task["state"] == "acquired"
            assert task["resumes"] == []
            assert isinstance(res.data.get("preload"), list)
        if expected == 200:
            assert res.data == {}
            assert task is not None
            assert task["state"] == "suspended"

    @rule(n=picks, choice=versions, state=st.sampled_from([*SETTABLE, "rejected_timedout"]))
    def task_fulfill(self, n: int, choice: str, state: str) -> None:
        tid = self.pick(n, "acquired")
        version = self.version_for(tid, choice)
        expected = 400 if state not in SETTABLE else self.fence_block(tid, version, "acquired")
        action = {
            "kind": "promise.settle",
            "head": {},
            "data": {"id": tid, "state": state, "value": {"data": "b2s="}},
        }
        res = self.request("task.fulfill", id=tid, version=version, action=action)
        assert res.status == expected, res
        if expected == 200:
            assert res.data["promise"]["state"] == state
            assert res.data["promise"]["settledAt"] == self.now
            assert Task.objects.get(promise_id=tid).state == "fulfilled"

    @rule(n=picks, choice=versions)
    def task_release(self, n: int, choice: str) -> None:
        tid = self.pick(n, "acquired")
        version = self.version_for(tid, choice)
        expected = self.fence_block(tid, version, "acquired")
        res = self.request("task.release", id=tid, version=version)
        assert res.status == expected, res
        if expected == 200:
            task = Task.objects.get(promise_id=tid)
            assert (task.state, task.version) == ("pending", version)

    @rule(worker=pids, refs=st.lists(st.tuples(picks, versions), max_size=3))
    def task_heartbeat(self, worker: str, refs: list[tuple[int, str]]) -> None:
        chosen = [(self.pick(n, "acquired"), c) for n, c in refs]
        refs_sent = [(tid, self.version_for(tid, c)) for tid, c in chosen]
        tasks = [{"id": tid, "version": version} for tid, version in refs_sent]
        extend = set()
        for tid, version in refs_sent:
            t, p = self.task(tid), self.promise(tid)
            if (
                t is not None
                and p is not None
                and viewed_task_state(t, p, self.now) == "acquired"
                and t["version"] == version
                and t["pid"] == worker
            ):
                extend.add(tid)
        res = self.request("task.heartbeat", pid=worker, tasks=tasks)
        assert (res.status, res.data) == (200, {})
        after = snapshot().tasks
        for tid, t in after.items():
            if tid in extend:
                assert t["expires_at"] == self.now + t["ttl"], t
            elif tid in self.prev.tasks:
                assert t["expires_at"] == self.prev.tasks[tid]["expires_at"], t

    @rule(n=picks)
    def task_halt(self, n: int) -> None:
        tid = self.pick(n)
        t, p = self.task(tid), self.promise(tid)
        if t is None or p is None:
            expected = 404
        else:
            expected = 409 if viewed_task_state(t, p, self.now) == "fulfilled" else 200
        res = self.request("task.halt", id=tid)
        assert res.status == expected, res
        if expected == 200:
            assert Task.objects.get(promise_id=tid).state == "halted"

    @rule(n=picks)
    def task_continue(self, n: int) -> None:
        tid = self.pick(n, "halted")
        t, p = self.task(tid), self.promise(tid)
        if t is None or p is None:
            expected = 404
        elif viewed_task_state(t, p, self.now) != "halted" or not live(p, self.now):
            expected = 409
        else:
            expected = 200
        res = self.request("task.continue", id=tid)
        assert res.status == expected, res
        if expected == 200:
            assert Task.objects.get(promise_id=tid).state == "pending"

    # --- invariants (digest §8.7), after every step ------------------------------------------

    @invariant()
    def spec_properties_hold(self) -> None:
        now, prev, cur = self.now, self.prev, snapshot()
        self.check_promises(cur, now)
        self.check_tasks(cur, now)
        self.check_subscriptions(cur)
        self.check_outbox(cur)
        self.check_transition(prev, cur, now)
        self.prev = cur

    def check_promises(self, cur: Snap, now: int) -> None:
        for pid, p in cur.promises.items():
            state, created, timeout, settled = (
                p["state"],
                p["created_at"],
                p["timeout_at"],
                p["settled_at"],
            )
            assert created <= timeout, ("created_at_lte_timeout_at", p)
            assert created <= now, ("created_at_lte_now", p)
            assert (settled is None) == (state == "pending"), ("settled_at_iff_not_pending", p)
            if state == "pending":
                assert created < timeout, ("pending_created_before_deadline", p)
                assert value_of(p["value_headers"], p["value_data"]) == {}, p
            else:
                assert created <= settled <= timeout, ("settled_at bounds", p)
                assert settled <= now, ("settled_at_lte_now", p)
            if state == "rejected_timedout":
                assert settled == timeout, ("timedout_is_server_owned", p)
            if settled is not None and settled == timeout:
                verdict = "resolved" if is_timer(p["tags"]) else "rejected_timedout"
                assert state == verdict, ("deadline_verdict_matches_timer_tag", p)
                assert value_of(p["value_headers"], p["value_data"]) == {}, p
            if state != "pending":
                frozen = (state, p["value_headers"], p["value_data"], settled)
                assert self.frozen_stored.setdefault(pid, frozen) == frozen, (
                    "preserved_settled_promise_record",
                    p,
                )
            view_state, view_at = projected(p, now)
            if view_state != "pending":
                value = value_of(p["value_headers"], p["value_data"])
                seen = (view_state, value, view_at)
                assert self.frozen_view.setdefault(pid, seen) == seen, ("stickiness", p)
            has_task = pid in cur.tasks
            assert has_task == (TARGET in p["tags"]), ("consistent_task_iff_targeted_promise", p)

    def check_tasks(self, cur: Snap, now: int) -> None:
        awaiters = {awaiter for _, awaiter in cur.callbacks}
        for tid, t in cur.tasks.items():
            p, state = cur.promises[tid], t["state"]
            acquired = state == "acquired"
            for f in ("pid", "ttl", "expires_at"):
                assert (t[f] is not None) == acquired, (f"acquired_iff_has_{f}", t)
            assert (t["retry_at"] is not None) == (state == "pending"), (
                "pending_iff_has_retry_at",
                t,
            )
            if state in ("suspended", "fulfilled"):
                assert t["resumes"] == [], (f"{state}_has_no_resumes", t)
            assert len(set(t["resumes"])) == len(t["resumes"]), ("resumes_unique", t)
            if acquired:
                assert t["version"] >= 1, ("acquired_version_positive", t)
            assert (p["state"] != "pending") == (state == "fulfilled"), (
                "settled promise <=> fulfilled task",
                p,
                t,
            )
            if state == "suspended" and live(p, now):
                assert tid in awaiters, ("consistent_suspended_task_holds_rung", t)

    def check_subscriptions(self, cur: Snap) -> None:
        for awaited, awaiter in cur.callbacks:
            assert awaited != awaiter, "awaiter_is_not_self"
            assert is_external(cur.promises[awaited]["tags"]), ("obligations_require_external",)
            assert TARGET in cur.promises[awaiter]["tags"], "callback_awaiter_is_targeted"
        for awaited, address in cur.listeners:
            assert is_external(cur.promises[awaited]["tags"]), ("obligations_require_external",)
            assert deliverable(address), "listener_addresses_deliverable"

    def check_outbox(self, cur: Snap) -> None:
        for key, m in cur.messages.items():
            if m["kind"] == "execute":
                task = cur.tasks.get(m["task_id"])
                assert task is not None, ("outbox_execute_names_existing_task", m)
                assert m["version"] <= task["version"], ("C9 outbox_never_ahead", m, task)
                target = cur.promises[m["task_id"]]["tags"].get(TARGET)
                assert m["address"] == target, ("execute_address_is_target_tag", m)
                assert key == m["task_id"]
            else:
                record = m["promise"]
                p = cur.promises[record["id"]]
                assert p["state"] != "pending", ("unblock_names_settled_promise", m)
                assert record == expected_promise_record(p, p["settled_at"]), (
                    "unblock carries the stored record",
                    m,
                )
                assert deliverable(m["address"]), ("unblock_address_deliverable", m)
                assert key == f"{record['id']}:notify:{m['address']}"

    def check_transition(self, prev: Snap, cur: Snap, now: int) -> None:
        assert prev.promises.keys() <= cur.promises.keys(), "monotone_promise_set_grows"
        assert prev.tasks.keys() <= cur.tasks.keys(), "monotone_task_set_grows"
        # Only a stale execute may leave (issue 25: the outbox cleanup deletes an execute whose
        # task is no longer pending at its version; nothing here delivers).
        for key in prev.messages.keys() - cur.messages.keys():
            m, t = prev.messages[key], cur.tasks.get(prev.messages[key]["task_id"] or "")
            owed = (
                t is not None
                and t["state"] == "pending"
                and t["version"] == m["version"]
                and live(cur.promises[m["task_id"]], now)
            )
            assert m["kind"] == "execute", ("outbox keys never disappear", m)
            assert not owed, ("an execute still owed never disappears", m, t)
        birth = ("param_headers", "param_data", "tags", "timeout_at", "created_at")
        for pid, p in cur.promises.items():
            old = prev.promises.get(pid)
            if old is None:
                live_birth = p["state"] == "pending" and p["created_at"] == now
                dead_birth = p["settled_at"] == p["created_at"] == p["timeout_at"] <= now
                assert live_birth or dead_birth, ("consistent_new_promise_born_clean", p)
                continue
            assert all(old[f] == p[f] for f in birth), ("birth_fields_immutable", old, p)
            if old["state"] != "pending":
                assert p["state"] == old["state"], ("settlement_is_one_way", p)
            elif p["state"] != "pending":
                client = p["settled_at"] == now < p["timeout_at"]
                client = client and p["state"] != "rejected_timedout"
                deadline = p["settled_at"] == p["timeout_at"] <= now
                assert client or deadline, ("consistent_promise_settlement_stamp", p)
        for tid, t in cur.tasks.items():
            old = prev.tasks.get(tid)
            if old is None:
                shape = (t["state"], t["version"])
                assert shape in {("pending", 0), ("fulfilled", 0), ("acquired", 1)}, (
                    "consistent_task_birth_state",
                    t,
                )
                continue
            self.check_task_edge(old, t, cur, prev, now)
        for awaited, awaiter in prev.callbacks - cur.callbacks:
            a = cur.promises[awaited]
            assert a["state"] != "pending", ("discharge_requires_settled", awaited, awaiter)
            w_task, w = cur.tasks[awaiter], cur.promises[awaiter]
            resumed = awaited in w_task["resumes"]
            assert resumed or viewed_task_state(w_task, w, now) == "fulfilled", (
                "callback_consumption_resumes_awaiter",
                awaited,
                w_task,
            )
        for awaited, address in prev.listeners - cur.listeners:
            assert cur.promises[awaited]["state"] != "pending", "discharge_requires_settled"
            assert f"{awaited}:notify:{address}" in cur.messages, (
                "listener_consumption_enqueues_unblock",
                awaited,
                address,
            )
        for key, m in cur.messages.items():
            old_m = prev.messages.get(key)
            if m["kind"] != "execute" or (old_m is not None and old_m == m):
                continue
            t, p = cur.tasks[m["task_id"]], cur.promises[m["task_id"]]
            assert live(p, now), ("execute_only_for_live_task", m, p)
            assert m["version"] == t["version"], ("new execute carries current version", m)

    def check_task_edge(
        self, old: dict[str, Any], t: dict[str, Any], cur: Snap, prev: Snap, now: int
    ) -> None:
        tid, s0, s1 = t["promise_id"], old["state"], t["state"]
        assert s1 in TASK_EDGES[s0], ("consistent_task_state_edge_admissible", old, t)
        acquisition = s0 == "pending" and s1 == "acquired"
        if acquisition:
            assert t["version"] == old["version"] + 1, ("version +1 on acquisition", old, t)
            assert t["expires_at"] == now + t["ttl"], ("acquisition lease", t)
            assert t["resumes"] == [], ("acquisition clears resumes", t)
        else:
            assert t["version"] == old["version"], ("version changes only on acquisition", t)
        if s0 == s1 == "acquired":
            assert (t["pid"], t["ttl"]) == (old["pid"], old["ttl"]), ("lease_holder_stable", t)
            if t["expires_at"] != old["expires_at"]:
                assert t["expires_at"] == now + t["ttl"], ("lease deadline is now + ttl", t)
        if s1 == "pending" and s0 != "pending":
            assert live(cur.promises[tid], now), ("preserved_no_dead_dispatch", t)
            # The spec arms the retry at now; a release without progress waits out its back-off
            # first (a deviation: docs/reference/deviations.md, RELEASE_BACKOFF_*).
            backoff = now + release_backoff_ms(t["release_count"])
            assert t["retry_at"] in (now, now + RETRY_MS, backoff), ("pending entry arms retry", t)
        if s0 == s1 == "pending" and t["retry_at"] != old["retry_at"]:
            assert old["retry_at"] <= now < t["retry_at"], ("retry re-arm only when due", old, t)
        if s0 == "suspended" and s1 == "pending":
            assert t["resumes"], ("wake records a resume", t)
        if s1 == "suspended" and s0 != "suspended":
            rungs = [a for a, w in cur.callbacks if w == tid]
            assert any(live(cur.promises[a], now) for a in rungs), (
                "consistent_suspension_registers_callback",
                t,
            )
        if old["resumes"] and not set(old["resumes"]) <= set(t["resumes"]):
            assert t["resumes"] == [], ("resumes grow or clear", old, t)
            assert s1 in ("acquired", "suspended", "fulfilled"), (
                "resumes cleared only on dispatch or park",
                old,
                t,
            )
        if s1 == "fulfilled" and s0 != "fulfilled":
            assert prev.promises[tid]["state"] == "pending", ("fulfilment needs settlement", t)
            assert cur.promises[tid]["state"] != "pending", t


def test_random_requests_and_internal_steps_keep_the_spec_state_properties(db: Any) -> None:
    run_state_machine_as_test(
        ResonateMachine,
        settings=settings(
            max_examples=60,
            stateful_step_count=30,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
