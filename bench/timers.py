"""Timer lateness: how long after its deadline a ``resonate:timer`` promise is seen settled.

One SSE stream is connected; ``--n`` timer promises are created one after another, each with a
deadline ``--lead`` ms to ``--lead + --spread`` ms after its creation (uniformly spread, so timers
fall due while others are being created), and each gets a listener on that stream. The server's
timeout step settles each at its deadline and the listener's ``unblock`` frame follows in the same
transaction. Lateness = the frame's arrival (wall clock, ms) minus the promise's ``timeoutAt``.

Why the frame and not a stored timestamp: a timed-out promise's ``settledAt`` is stamped at the
deadline itself (the protocol's rule), whenever the step ran, so no stored column records how late
the step was. The frame's arrival is what a worker awaiting the timer notices; it includes the
delivery (about a millisecond here: bench/dispatch_latency.py).

Starts its own embedded server on a fresh SQLite file unless ``--url`` names a running one.
``make bench`` (bench/run.py, section ``timers``) runs it against PostgreSQL, embedded and under
Celery.

    .venv/bin/python bench/timers.py [--n 300] [--spread 5000] [--url http://127.0.0.1:8001]
"""

from __future__ import annotations

import argparse
import json
import queue
import random
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from dispatch_latency import percentile, start_server


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def run(url: str, n: int, spread_ms: int, lead_ms: int = 300, seed: int = 15) -> dict[str, Any]:
    group, sid = "bench", uuid.uuid4().hex[:8]
    frames: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()
    connected = threading.Event()

    def reader() -> None:
        try:
            with httpx.stream("GET", f"{url}/poll/{group}/{sid}", timeout=None) as res:
                connected.set()
                for line in res.iter_lines():
                    if line.startswith("data: "):
                        frames.put((time.time_ns() / 1e6, json.loads(line[6:])))
        except httpx.HTTPError:
            return  # the server went away at the end of the run

    threading.Thread(target=reader, daemon=True).start()
    if not connected.wait(10):
        raise SystemExit(f"no SSE stream from {url}")
    time.sleep(0.5)  # the hub registers the stream
    client = httpx.Client(base_url=url, timeout=10)

    def post(kind: str, data: dict[str, object]) -> None:
        body = {"kind": kind, "head": {"corrId": "t", "version": "2026-04-01"}, "data": data}
        res = client.post("/", json=body)
        if res.status_code != 200:
            raise SystemExit(f"{kind} answered {res.status_code}: {res.text[:300]}")

    rng = random.Random(seed)
    address = f"poll://uni@{group}/{sid}"
    deadlines: dict[str, int] = {}
    for i in range(n):
        pid = f"timer-{sid}-{i}"
        at = now_ms() + lead_ms + int(rng.random() * spread_ms)
        post("promise.create", {"id": pid, "timeoutAt": at, "tags": {"resonate:timer": "true"}})
        post("promise.register_listener", {"awaited": pid, "address": address})
        deadlines[pid] = at
    created_by = now_ms()
    lateness: dict[str, float] = {}
    give_up = time.monotonic() + (max(deadlines.values()) - created_by) / 1000 + 15
    while len(lateness) < n and time.monotonic() < give_up:
        try:
            arrived, frame = frames.get(timeout=1)
        except queue.Empty:
            continue
        record = frame.get("data", {}).get("promise", {})
        pid = record.get("id")
        if frame.get("kind") == "unblock" and pid in deadlines and pid not in lateness:
            lateness[pid] = arrived - deadlines[pid]
    client.close()
    late = list(lateness.values())
    return {
        "n": n,
        "received": len(late),
        "spread_ms": spread_ms,
        "lead_ms": lead_ms,
        "p50_ms": percentile(late, 50) if late else float("nan"),
        "p99_ms": percentile(late, 99) if late else float("nan"),
        "max_ms": max(late, default=float("nan")),
        "min_ms": min(late, default=float("nan")),
    }


def describe(result: dict[str, Any]) -> str:
    return (
        f"{result['received']}/{result['n']} timers: lateness p50 {result['p50_ms']:.1f} ms, "
        f"p99 {result['p99_ms']:.1f} ms, max {result['max_ms']:.1f} ms "
        f"(min {result['min_ms']:.1f} ms)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--spread", type=int, default=5000, help="ms over which deadlines fall")
    parser.add_argument("--url", default="", help="a running server (default: start one)")
    parser.add_argument("--database-url", default="", help="for the server started here")
    args = parser.parse_args()
    proc = None
    url = args.url
    if not url:
        db = args.database_url or f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.sqlite3'}"
        proc, url = start_server({"DATABASE_URL": db, "CELERY_BROKER_URL": ""})
    try:
        result = run(url, args.n, args.spread)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(describe(result) + " (target p50 <= 10 ms, p99 <= 50 ms)")


if __name__ == "__main__":
    main()
