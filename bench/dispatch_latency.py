"""Dispatch latency: from the response of the request that makes a task due to its ``execute``
frame on a connected SSE stream.

Starts its own server (embedded, on a fresh SQLite file by default; ``--database-url`` for another
database; ``--url`` to measure a running one), connects one stream, then creates targeted promises
one at a time at light load. Prints p50/p99 and, as a baseline measured in the same run, the round
trip of a read (``promise.get``): the ratio says how many read round trips a dispatch costs on
this machine. ``make bench`` (bench/run.py) calls ``run`` against PostgreSQL.

    .venv/bin/python bench/dispatch_latency.py [--n 300] [--url http://127.0.0.1:8001]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(env_extra: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, **env_extra}
    py = str(ROOT / ".venv" / "bin" / "python")
    subprocess.run([py, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    proc = subprocess.Popen([py, "manage.py", "serve", "--port", str(port)], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(url + "/ready", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not become ready")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(url: str, n: int) -> dict[str, float]:
    group, sid = "bench", uuid.uuid4().hex[:8]
    frames: queue.Queue[tuple[float, dict[str, Any]]] = queue.Queue()

    def reader() -> None:
        try:
            with httpx.stream("GET", f"{url}/poll/{group}/{sid}", timeout=None) as res:
                for line in res.iter_lines():
                    if line.startswith("data: "):
                        frames.put((time.perf_counter(), json.loads(line[6:])))
        except httpx.HTTPError:
            return  # the server went away at the end of the run

    threading.Thread(target=reader, daemon=True).start()
    time.sleep(1.0)
    client = httpx.Client(base_url=url, timeout=10)

    def post(kind: str, data: dict[str, object]) -> dict[str, object]:
        body = {"kind": kind, "head": {"corrId": "b", "version": "2026-04-01"}, "data": data}
        res = client.post("/", json=body)
        return dict(res.json())

    far = int(time.time() * 1000) + 3_600_000
    post("promise.create", {"id": f"base-{sid}", "timeoutAt": far})
    base = []
    for _ in range(n):
        t0 = time.perf_counter()
        post("promise.get", {"id": f"base-{sid}"})
        base.append((time.perf_counter() - t0) * 1000)
    lat, lat_sent = [], []
    target = f"poll://uni@{group}/{sid}"
    for i in range(n):
        pid = f"lat-{sid}-{i}"
        sent = time.perf_counter()
        post("promise.create", {"id": pid, "timeoutAt": far, "tags": {"resonate:target": target}})
        answered = time.perf_counter()
        while True:
            arrived, frame = frames.get(timeout=10)  # queue.Empty ends the run: a lost dispatch
            task = frame.get("data", {}).get("task", {})
            if task.get("id") == pid:
                break
        lat.append((arrived - answered) * 1000)
        lat_sent.append((arrived - sent) * 1000)
        time.sleep(0.01)  # light load: one request in flight
    return {  # the frame may arrive before the response is read: then the latency is negative
        "n": n,
        "dispatch_p50_ms": percentile(lat, 50),
        "dispatch_p99_ms": percentile(lat, 99),
        "from_request_p50_ms": percentile(lat_sent, 50),
        "from_request_p99_ms": percentile(lat_sent, 99),
        "read_rtt_p50_ms": percentile(base, 50),
        "ratio_p50_dispatch_to_read": statistics.median(lat) / statistics.median(base),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--url", default="", help="a running server (default: start one)")
    parser.add_argument("--database-url", default="", help="for the server started here")
    args = parser.parse_args()
    proc = None
    url = args.url
    if not url:
        db = args.database_url or f"sqlite:///{Path(tempfile.mkdtemp()) / 'bench.sqlite3'}"
        proc, url = start_server({"DATABASE_URL": db, "CELERY_BROKER_URL": ""})
    try:
        result = run(url, args.n)
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"dispatch latency over {result['n']} creates (target p50 <= 20 ms, p99 <= 100 ms)")
    print(f"  p50 {result['dispatch_p50_ms']:.1f} ms   p99 {result['dispatch_p99_ms']:.1f} ms")
    print(f"  baseline read round trip p50 {result['read_rtt_p50_ms']:.1f} ms")
    print(f"  ratio dispatch p50 / read p50 = {result['ratio_p50_dispatch_to_read']:.2f}")
    (ROOT / "bench/results/dispatch.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
