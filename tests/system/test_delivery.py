"""Delivery end to end: real server processes, real SSE streams, real HTTP pushes.

Scenarios marked with the ``stack`` fixture run against both shapes: production (PostgreSQL,
Redis, ``serve --no-embedded``, a Celery worker and beat) and embedded (``serve`` alone on SQLite).
"""

from __future__ import annotations

from typing import Any

import pytest

from .harness import (
    FAR,
    PUSH_TOKEN,
    Receiver,
    Stack,
    execute,
    free_port,
    now_ms,
    streams,
    unblock,
    unique,
    wait_until,
)

pytestmark = pytest.mark.integration

EXTERNAL = {"resonate:external": "true"}


def is_execute_for(task_id: str, version: int | None = None) -> Any:
    def match(frame: dict[str, Any]) -> bool:
        task = frame.get("data", {}).get("task", {})
        return (
            frame.get("kind") == "execute"
            and task.get("id") == task_id
            and (version is None or task.get("version") == version)
        )

    return match


def is_unblock_for(promise_id: str) -> Any:
    def match(frame: dict[str, Any]) -> bool:
        promise = frame.get("data", {}).get("promise", {})
        return frame.get("kind") == "unblock" and promise.get("id") == promise_id

    return match


def wait_outbox_without(stack: Stack, key: str) -> None:
    wait_until(lambda: not stack.outbox.keyed(key), f"outbox row {key!r} to go", logs=stack)


# --- both shapes --------------------------------------------------------------------------------


def test_a_targeted_promise_executes_on_a_stream_of_its_group(stack: Stack) -> None:
    group = unique("g")
    with streams(stack, (group, "w1")) as [worker]:
        pid = unique("p")
        stack.ok(
            "promise.create",
            id=pid,
            timeoutAt=FAR,
            tags={"resonate:target": f"poll://any@{group}"},
        )
        frame = worker.wait_for(is_execute_for(pid), f"execute {pid}")
        assert frame == execute(pid, 0)
        assert worker.content_type.startswith("text/event-stream")
        # An idle stream is kept open with comment frames (every 500 ms in this session).
        wait_until(lambda: ": keepalive" in worker.comments, "a keepalive comment", logs=stack)
        # Delivered: the stream stayed open SSE_ACK_GRACE_MS after the write.
        wait_outbox_without(stack, pid)


def test_a_listener_gets_the_settled_record_on_exactly_its_stream(stack: Stack) -> None:
    group = unique("g")
    with streams(stack, (group, "mine"), (group, "other")) as [mine, other]:
        pid = unique("ext")
        stack.ok("promise.create", id=pid, timeoutAt=FAR, tags=EXTERNAL)
        address = f"poll://uni@{group}/mine"
        stack.ok("promise.register_listener", awaited=pid, address=address)
        settled = stack.ok("promise.settle", id=pid, state="resolved", value={"data": "ok"})
        record = settled["promise"]
        assert record["state"] == "resolved"

        frame = mine.wait_for(is_unblock_for(pid), f"unblock {pid}")
        assert frame == unblock(record)
        wait_outbox_without(stack, f"{pid}:notify:{address}")
        assert [f for f in other.frames if is_unblock_for(pid)(f)] == []


def test_a_message_for_a_stream_not_connected_waits_until_it_connects(stack: Stack) -> None:
    group = unique("g")
    late_address = f"poll://uni@{group}/late"
    with streams(stack, (group, "early")) as [early]:
        waiting = unique("late")
        stack.ok(
            "promise.create", id=waiting, timeoutAt=FAR, tags={"resonate:target": late_address}
        )
        # A later message the connected stream does receive: once it arrives, the web process has
        # looked at the outbox after the first message was committed.
        barrier = unique("barrier")
        stack.ok(
            "promise.create",
            id=barrier,
            timeoutAt=FAR,
            tags={"resonate:target": f"poll://any@{group}"},
        )
        early.wait_for(is_execute_for(barrier, 0), f"execute {barrier}")
        assert [row["address"] for row in stack.outbox.keyed(waiting)] == [late_address]

        with streams(stack, (group, "late")) as [late]:
            frame = late.wait_for(is_execute_for(waiting), f"execute {waiting}")
            assert frame == execute(waiting, 0)
            wait_outbox_without(stack, waiting)
        assert [f for f in early.frames if is_execute_for(waiting)(f)] == []


def test_anycast_to_a_named_stream_prefers_it_and_falls_back_to_the_group(stack: Stack) -> None:
    group = unique("g")
    with streams(stack, (group, "a"), (group, "b")) as [a, b]:
        # Six messages for b: were the id ignored, each would land on a half of the time.
        named = [unique("named") for _ in range(6)]
        for pid in named:
            target = f"poll://any@{group}/b"
            stack.ok("promise.create", id=pid, timeoutAt=FAR, tags={"resonate:target": target})
        # Nobody is connected as "gone": any stream of the group takes it.
        fallback = unique("fallback")
        target = f"poll://any@{group}/gone"
        stack.ok("promise.create", id=fallback, timeoutAt=FAR, tags={"resonate:target": target})

        for pid in named:
            assert b.wait_for(is_execute_for(pid), f"execute {pid}") == execute(pid, 0)
        wait_until(
            lambda: [f for f in a.frames + b.frames if is_execute_for(fallback)(f)],
            f"execute {fallback} on a or b",
            logs=stack,
        )
        for pid in [*named, fallback]:
            wait_outbox_without(stack, pid)
        assert [f for f in a.frames if f["data"]["task"]["id"] in named] == []
        fallbacks = [f for f in a.frames + b.frames if is_execute_for(fallback)(f)]
        assert fallbacks == [execute(fallback, 0)]


def test_a_durable_timeout_unblocks_a_listener_by_itself(stack: Stack) -> None:
    group = unique("g")
    with streams(stack, (group, "t")) as [listener]:
        pid = unique("timeout")
        created = stack.ok("promise.create", id=pid, timeoutAt=now_ms() + 1500, tags=EXTERNAL)
        registered = stack.ok(
            "promise.register_listener", awaited=pid, address=f"poll://uni@{group}/t"
        )
        # Both requests must have run before the deadline, or there is nothing to time out.
        assert created["promise"]["state"] == "pending"
        assert registered["promise"]["state"] == "pending"

        frame = listener.wait_for(is_unblock_for(pid), f"unblock {pid}")
        assert frame["data"]["promise"]["state"] == "rejected_timedout"
        assert frame == unblock(stack.ok("promise.get", id=pid)["promise"])


def test_an_expired_lease_is_executed_again_at_the_same_version(stack: Stack) -> None:
    group = unique("g")
    with streams(stack, (group, "w")) as [worker]:
        pid = unique("lease")
        stack.ok(
            "promise.create",
            id=pid,
            timeoutAt=FAR,
            tags={"resonate:target": f"poll://any@{group}"},
        )
        worker.wait_for(is_execute_for(pid, 0), f"execute {pid} v0")
        acquired = stack.ok("task.acquire", id=pid, version=0, pid="it-worker", ttl=1000)
        assert acquired["task"]["version"] == 1

        # No heartbeat: the tick (beat, or the embedded ticker) finds the lapsed lease and the
        # task is offered again.
        frame = worker.wait_for(is_execute_for(pid, 1), f"execute {pid} v1", timeout=30)
        assert frame == execute(pid, 1)
    task = stack.ok("task.get", id=pid)["task"]
    assert (task["state"], task["version"]) == ("pending", 1)


# --- production shape only ----------------------------------------------------------------------


def test_streams_on_two_web_processes_get_their_own_messages(production: Stack) -> None:
    second = Stack(
        "production-2",
        f"http://127.0.0.1:{free_port()}",
        production.env,
        production.logdir,
        production.outbox,
    )
    try:
        second.start_web("--no-embedded")
        group = unique("g")
        with streams(production, (group, "a")) as [a], streams(second, (group, "b")) as [b]:
            for_a = [unique("a") for _ in range(3)]
            for_b = [unique("b") for _ in range(3)]
            sent = [(pid, f"poll://any@{group}/a") for pid in for_a[:2]]
            sent += [(for_a[2], f"poll://uni@{group}/a")]
            sent += [(pid, f"poll://any@{group}/b") for pid in for_b[:2]]
            sent += [(for_b[2], f"poll://uni@{group}/b")]
            for pid, target in sent:
                production.ok(
                    "promise.create", id=pid, timeoutAt=FAR, tags={"resonate:target": target}
                )
            for stream, pids in ((a, for_a), (b, for_b)):
                for pid in pids:
                    assert stream.wait_for(is_execute_for(pid), f"execute {pid}") == execute(pid, 0)
            for pid, _ in sent:
                wait_outbox_without(production, pid)
            assert [f for f in a.frames if f["data"]["task"]["id"] in for_b] == []
            assert [f for f in b.frames if f["data"]["task"]["id"] in for_a] == []
    finally:
        second.stop()


def test_a_worker_killed_mid_drain_loses_no_message(production: Stack) -> None:
    slow = Receiver(delay=1.0)
    try:
        pid = unique("batch")
        production.ok("promise.create", id=pid, timeoutAt=FAR, tags=EXTERNAL)
        paths = [f"/listener/{i}" for i in range(6)]
        for path in paths:
            production.ok("promise.register_listener", awaited=pid, address=slow.url(path))
        # One commit writes six unblock rows; the worker drains them one slow POST at a time.
        record = production.ok("promise.settle", id=pid, state="resolved", value={"data": "x"})[
            "promise"
        ]
        wait_until(lambda: slow.snapshot(), "the first push to arrive", logs=production)
        production.procs["worker"].kill_hard()

        before = {r.path for r in slow.snapshot()}
        assert len(before) < len(paths), "the drain finished before the worker was killed"
        keys = {f"{pid}:notify:{slow.url(path)}" for path in paths}
        assert {row["key"] for row in production.outbox.rows()} >= keys

        production.start_worker()
        wait_until(
            lambda: {r.path for r in slow.snapshot()} >= set(paths),
            "every listener to be pushed after the restart",
            timeout=60,
            logs=production,
        )
        # Only these rows: SSE messages of other tests whose streams closed within
        # SSE_ACK_GRACE_MS of the write stay, due again.
        wait_until(
            lambda: not keys & {row["key"] for row in production.outbox.rows()},
            "every listener's row to go",
            logs=production,
        )
        for got in slow.snapshot():
            assert got.json() == unblock(record)
    finally:
        slow.close()


# --- HTTP push (embedded) -----------------------------------------------------------------------


def test_a_push_failing_twice_is_retried_until_delivered(embedded: Stack) -> None:
    flaky = Receiver(fail_first=2)
    try:
        pid = unique("push")
        embedded.ok(
            "promise.create", id=pid, timeoutAt=FAR, tags={"resonate:target": flaky.url("/run")}
        )
        wait_outbox_without(embedded, pid)
        got = flaky.snapshot()
        assert len(got) == 3
        assert [r.json() for r in got] == [execute(pid, 0)] * 3
    finally:
        flaky.close()


def test_a_push_carries_its_destinations_credential_and_the_exact_message(
    embedded: Stack, receiver: Receiver
) -> None:
    target = unique("push")
    embedded.ok(
        "promise.create", id=target, timeoutAt=FAR, tags={"resonate:target": receiver.url("/x")}
    )
    ext = unique("ext")
    embedded.ok("promise.create", id=ext, timeoutAt=FAR, tags=EXTERNAL)
    embedded.ok("promise.register_listener", awaited=ext, address=receiver.url("/u"))
    record = embedded.ok("promise.settle", id=ext, state="rejected", value={"data": "no"})[
        "promise"
    ]

    wait_until(lambda: len(receiver.snapshot()) >= 2, "two pushes", logs=embedded)
    wait_outbox_without(embedded, target)
    wait_outbox_without(embedded, f"{ext}:notify:{receiver.url('/u')}")
    by_path = {r.path: r for r in receiver.snapshot()}
    assert by_path["/x"].json() == execute(target, 0)
    assert by_path["/u"].json() == unblock(record)
    for got in by_path.values():
        assert got.headers["authorization"] == f"Bearer {PUSH_TOKEN}"
        assert got.headers["content-type"] == "application/json"
