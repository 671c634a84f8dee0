"""A fixed-rate HTTP load generator for ``POST /`` (the "p99 at half the max rate" runs).

``--conns`` keep-alive connections (asyncio, raw HTTP/1.1, no client library on the hot path)
share one schedule: request *k* is due at ``start + k / rate``. Each connection takes the next
slot, waits for its time, sends, and reads the answer, so its requests stay sequential (the
multi-request workloads walk their cycle in order). Latency is measured from the *scheduled*
time (wrk2-style: a server that falls behind shows it, instead of silently slowing the
generator down) and, separately, from the moment the request was written.

    python bench/loadgen.py --url http://127.0.0.1:8001 --workload pair --rate 500 --conns 8 \
        --seconds 10

Prints one JSON object: achieved rate, p50/p90/p99/max (ms) for both latencies, non-200 count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit

VERSION = "2026-04-01"
HOUR = 3_600_000


def envelope(kind: str, data: object) -> bytes:
    head = {"corrId": "lg", "version": VERSION}
    return json.dumps({"kind": kind, "head": head, "data": data}, separators=(",", ":")).encode()


def pair(prefix: str, far: int) -> Iterator[bytes]:
    """(2a) promise.create then promise.settle, as bench/lua/promise_pair.lua."""
    n = 0
    while True:
        n += 1
        pid = f"{prefix}-{n}"
        param = {"headers": {}, "data": "e30="}
        yield envelope("promise.create", {"id": pid, "timeoutAt": far, "param": param, "tags": {}})
        yield envelope("promise.settle", {"id": pid, "state": "resolved", "value": param})


def _tags(root: str, scope: str, target: bool) -> dict[str, str]:
    tags = {
        "resonate:origin": root,
        "resonate:branch": root,
        "resonate:parent": root,
        "resonate:scope": scope,
    }
    if target:
        tags["resonate:target"] = "poll://any@bench"
    return tags


def cycle(prefix: str, far: int) -> Iterator[bytes]:
    """(2b) the SDK-shaped task cycle, as bench/lua/task_cycle.lua (six requests)."""
    n = 0
    param = {"headers": {}, "data": "e30="}
    head = {"corrId": "i", "version": VERSION}

    def create(pid: str, root: str, scope: str, target: bool) -> dict[str, object]:
        data = {"id": pid, "timeoutAt": far, "param": param, "tags": _tags(root, scope, target)}
        return {"kind": "promise.create", "head": head, "data": data}

    def settle(pid: str) -> dict[str, object]:
        data = {"id": pid, "state": "resolved", "value": param}
        return {"kind": "promise.settle", "head": head, "data": data}

    while True:
        n += 1
        root = f"{prefix}-{n}"
        action = create(root, root, "global", True)
        yield envelope("task.create", {"pid": f"{prefix}-w", "ttl": 60_000, "action": action})
        for child in (f"{root}:1", f"{root}:2"):
            for action in (create(child, root, "local", False), settle(child)):
                yield envelope("task.fence", {"id": root, "version": 1, "action": action})
        yield envelope("task.fulfill", {"id": root, "version": 1, "action": settle(root)})


WORKLOADS: dict[str, Callable[[str, int], Iterator[bytes]]] = {"pair": pair, "cycle": cycle}


async def read_response(reader: asyncio.StreamReader) -> int:
    """Read one HTTP/1.1 response (Content-Length or chunked); return its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if "content-length" in headers:
        await reader.readexactly(int(headers["content-length"]))
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    return status


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def run(
    url: str, workload: str, rate: float, conns: int, seconds: float
) -> dict[str, object]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    far = int(time.time() * 1000) + HOUR
    run_id = uuid.uuid4().hex[:8]
    total = int(rate * seconds)
    scheduled: list[float] = []
    service: list[float] = []
    bad = 0
    next_slot = 0
    start = 0.0
    deadline = 0.0
    ready = asyncio.Event()

    async def connection(i: int) -> None:
        nonlocal next_slot, bad
        reader, writer = await asyncio.open_connection(host, port)
        requests = WORKLOADS[workload](f"lg-{run_id}-{i}", far)
        prefix = f"POST / HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        await ready.wait()
        try:
            while next_slot < total:
                slot = start + next_slot / rate
                next_slot += 1
                delay = slot - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if time.perf_counter() > deadline:
                    return  # bounded in time even if the server stalls
                body = next(requests)
                sent = time.perf_counter()
                writer.write(f"{prefix}Content-Length: {len(body)}\r\n\r\n".encode() + body)
                status = await read_response(reader)
                done = time.perf_counter()
                scheduled.append((done - slot) * 1000)
                service.append((done - sent) * 1000)
                if status != 200:
                    bad += 1
        finally:
            writer.close()

    tasks = [asyncio.create_task(connection(i)) for i in range(conns)]
    await asyncio.sleep(0.5)  # let every connection open before the schedule starts
    start = time.perf_counter()
    deadline = start + seconds * 2 + 5
    ready.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=seconds * 2 + 10)
    elapsed = time.perf_counter() - start
    return {
        "workload": workload,
        "offered_rate": rate,
        "conns": conns,
        "requests": len(service),
        "seconds": elapsed,
        "achieved_rate": len(service) / elapsed if elapsed else 0.0,
        "non200": bad,
        "p50_ms": percentile(scheduled, 50),
        "p90_ms": percentile(scheduled, 90),
        "p99_ms": percentile(scheduled, 99),
        "max_ms": max(scheduled, default=float("nan")),
        "service_p50_ms": percentile(service, 50),
        "service_p99_ms": percentile(service, 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="pair")
    parser.add_argument("--rate", type=float, required=True, help="requests per second")
    parser.add_argument("--conns", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10)
    args = parser.parse_args()
    if args.rate <= 0 or args.conns <= 0 or not 0 < args.seconds <= 300:
        raise SystemExit("need rate > 0, conns > 0 and 0 < seconds <= 300")
    result = asyncio.run(run(args.url, args.workload, args.rate, args.conns, args.seconds))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
