"""The client loop shared by the peer programs (stdlib only: it runs in the SDK's and DBOS's
virtualenvs, imported as a sibling of the program that runs, not as part of a package).

A program calls :func:`serve` with ``start(i, workflow_id)``: an awaitable that starts workflow
``i`` under that id and returns its result. :func:`serve` prints ``READY``, then answers each
command line on stdin, ``{"count", "in_flight", "prefix", "timeout_s"}``, with one line
``RESULT {...}``: how many workflows completed, failed or returned a wrong value, the seconds from
the first start to the last completion, and every workflow's latency (start to result) in ms.
At most ``in_flight`` workflows are outstanding at once: that many coroutines each take the next
index and await its result before taking another. End of stdin ends the program.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

Start = Callable[[int, str], Awaitable[Any]]


def expected(i: int) -> int:
    """Every workflow's three steps add 1, 2 and 3 to its input."""
    return i + 6


async def batch(start: Start, count: int, in_flight: int, prefix: str, timeout_s: float) -> dict:
    indices = itertools.count()
    latencies: list[float] = []
    failures: list[str] = []
    wrong = 0
    first: float | None = None
    last: float | None = None

    async def lane() -> None:
        nonlocal wrong, first, last
        for i in indices:
            if i >= count:
                return
            began = time.perf_counter()
            if first is None:
                first = began
            try:
                value = await start(i, f"{prefix}-{i}")
            except Exception as exc:  # a failed workflow is counted, the run goes on
                failures.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            ended = time.perf_counter()
            if value != expected(i):
                wrong += 1
            latencies.append((ended - began) * 1000)
            last = ended if last is None else max(last, ended)

    lanes = [asyncio.create_task(lane()) for _ in range(max(1, min(in_flight, count)))]
    _, pending = await asyncio.wait(lanes, timeout=timeout_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    seconds = (last - first) if first is not None and last is not None else 0.0
    return {
        "count": count,
        "completed": len(latencies),
        "failed": len(failures),
        "failures": failures[:5],
        "wrong": wrong,
        "timed_out": bool(pending),
        "seconds": seconds,
        "latencies_ms": [round(x, 3) for x in latencies],
    }


async def serve(start: Start) -> None:
    print("READY", flush=True)
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            return
        if not line.strip():
            continue
        cmd = json.loads(line)
        result = await batch(
            start,
            int(cmd["count"]),
            int(cmd["in_flight"]),
            str(cmd["prefix"]),
            float(cmd["timeout_s"]),
        )
        print("RESULT " + json.dumps(result), flush=True)
