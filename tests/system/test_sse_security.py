"""SSE against a real ``manage.py serve`` (both shapes): what a stream costs the server, one stream
per ``(group, id)``, and an ``unblock`` that survives a worker killed with it unread."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .harness import (
    FAR,
    PYTHON,
    ROOT,
    SseStream,
    Stack,
    free_port,
    streams,
    unblock,
    unique,
    wait_until,
)
from .test_delivery import EXTERNAL, is_execute_for, is_unblock_for

pytestmark = pytest.mark.integration

STREAMS = 200


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


async def open_streams(base_url: str, group: str, count: int) -> list[asyncio.StreamWriter]:
    """``count`` streams, each read up to its first comment frame (so it is open server-side)."""
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    writers = []
    for i in range(count):
        reader, writer = await asyncio.open_connection(host, int(port))
        request = f"GET /poll/{group}/w{i} HTTP/1.1\r\nHost: {host}\r\n"
        writer.write(request.encode() + b"Accept: text/event-stream\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 200"), head
        await asyncio.wait_for(reader.readuntil(b": connected\n\n"), 30)
        writers.append(writer)
    return writers


def test_an_open_stream_costs_no_thread(stack: Stack) -> None:
    # Regression: Django's ASGI handler gave each request a thread for its sync middleware and
    # kept it until the response ended, i.e. one OS thread per open stream.
    pid = stack.procs["web"].popen.pid

    async def measure() -> tuple[int, int]:
        warm = await open_streams(stack.base_url, unique("warm"), 1)  # the hub thread, once
        before = threads(pid)
        writers = await open_streams(stack.base_url, unique("g"), STREAMS)
        during = threads(pid)
        for writer in [*warm, *writers]:
            writer.close()
        return before, during

    before, during = asyncio.run(measure())
    assert during - before < 10, f"{STREAMS} streams took {during - before} threads"


def test_a_second_stream_on_the_same_id_replaces_the_first(stack: Stack) -> None:
    # Regression: both stayed connected and each message went to one of them at random.
    group = unique("g")
    with streams(stack, (group, "w1")) as [first], streams(stack, (group, "w1")) as [second]:
        wait_until(first.ended.is_set, "the first stream to end", logs=stack)
        assert first.error is None
        pids = [unique("uni") for _ in range(6)]
        for pid in pids:
            target = f"poll://uni@{group}/w1"
            stack.ok("promise.create", id=pid, timeoutAt=FAR, tags={"resonate:target": target})
        for pid in pids:
            second.wait_for(is_execute_for(pid, 0), f"execute {pid} on the second stream")
        assert first.frames == []


@pytest.fixture
def graced(stack: Stack) -> Iterator[Stack]:
    """Another web process on the stack's database whose frames stay unconfirmed for 15 s (the
    default SSE_ACK_GRACE_MS; the session's is 1 s so that other tests' rows go quickly)."""
    env = {**stack.env, "RESONATE_SSE_ACK_GRACE_MS": "15000"}
    web = dataclasses.replace(stack, base_url=f"http://127.0.0.1:{free_port()}", env=env, procs={})
    try:
        web.start_web("--no-embedded")  # the stack's own processes run the steps
        yield web
    finally:
        web.stop()


def test_a_worker_killed_with_its_unblock_unread_gets_it_on_reconnect(
    graced: Stack, tmp_path: Path
) -> None:
    stack = graced
    # Regression: the row was deleted once the frame was handed to the server; a worker frozen
    # with the frame in its socket buffer and then killed never saw the unblock again.
    group = unique("g")
    awaited = unique("ext")
    stack.ok("promise.create", id=awaited, timeoutAt=FAR, tags=EXTERNAL)
    out = tmp_path / "worker.out"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if stack.token:
        env["SSE_WORKER_TOKEN"] = stack.token
    argv = [PYTHON, "-m", "tests.system.sse_worker", stack.base_url, group, "w1", awaited]
    with out.open("wb") as sink:
        worker = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "registered 200" in out.read_text(), "the worker to listen", logs=stack)
        os.kill(worker.pid, signal.SIGSTOP)
        record = stack.ok("promise.settle", id=awaited, state="resolved", value={"data": "ok"})[
            "promise"
        ]
        key = f"{awaited}:notify:poll://uni@{group}/w1"
        # The hub claims the unblock for the frozen worker's stream and writes it (today's code
        # then deleted the row).
        wait_until(
            lambda: all(row["attempts"] >= 1 for row in stack.outbox.keyed(key)),
            "the unblock to be claimed for the frozen worker",
            logs=stack,
        )
        time.sleep(0.5)  # the write itself: the frame sits unread in the frozen worker's socket
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
        assert out.read_text().splitlines() == ["registered 200"]  # it never read the frame

        again = SseStream(f"{stack.base_url}/poll/{group}/w1")
        try:
            frame = again.wait_for(is_unblock_for(awaited), f"unblock {awaited} after the kill")
            assert frame == unblock(record)
        finally:
            again.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=30)
