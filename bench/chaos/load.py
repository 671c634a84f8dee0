"""The load: workflows, human-in-the-loop settlements and a listener population, and what was seen.

Runs on one asyncio loop in a thread of its own (:class:`Driver`), so the main thread can inject
faults meanwhile. Every request is recorded with its status (0: no HTTP answer), so the figures
come from what clients saw; every write answered 200 is remembered so the checker can prove it is
still there; every ``unblock`` that arrives (HTTP push or SSE) is recorded with its time.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Coroutine
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

FAR_MS = 3_600_000  # timeouts an hour away: no promise of the run times out on its own
PUSH_PATH = "/unblock/"
SSE_GROUP = "chaos-sse"
# Listeners are accepted on external promises only (conformance C3).
EXTERNAL = {"resonate:external": "true"}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def encode(value: Any) -> dict[str, Any]:
    """A value as the SDKs write it: base64 of its JSON."""
    return {"headers": {}, "data": base64.b64encode(json.dumps(value).encode()).decode()}


def decode(record: dict[str, Any]) -> Any:
    data = (record.get("value") or {}).get("data")
    return json.loads(base64.b64decode(data)) if data else None


def bonus(n: int) -> int:
    return n % 7 + 1


def expected(n: int) -> dict[str, int]:
    return {"n": n, "value": (n + 1) ** 2 + bonus(n)}


# --- what was seen -------------------------------------------------------------------------------


@dataclass
class Seen:
    """Everything the clients saw, appended from the driver's loop and the receiver's threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: list[tuple[float, str, int]] = field(default_factory=list)  # (time, kind, status)
    # workflow id -> (scenario, n, start time); the create answered 200
    workflows: dict[str, tuple[str, int, float]] = field(default_factory=dict)
    unstarted: Counter[str] = field(default_factory=Counter)  # per scenario: never created
    # acknowledged writes: promise id -> (scenario, value) of the settle answered 200
    settled: dict[str, tuple[str, Any]] = field(default_factory=dict)
    created: dict[str, str] = field(default_factory=dict)  # promise id -> scenario (create 200)
    # listeners registered (200) before their promise's settle was first sent: (id, address)
    listeners: dict[tuple[str, str], str] = field(default_factory=dict)
    # every unblock received: (promise id, address) -> arrival times
    unblocks: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    completed: dict[str, tuple[Any, float]] = field(default_factory=dict)  # wf id -> value, when

    def request(self, kind: str, status: int) -> None:
        with self.lock:
            self.requests.append((time.monotonic(), kind, status))

    def unblock(self, promise_id: str, address: str) -> None:
        with self.lock:
            self.unblocks[(promise_id, address)].append(time.monotonic())


# --- the HTTP push receiver ----------------------------------------------------------------------


class Receiver:
    """A loopback endpoint recording every pushed ``unblock``; it can go down and come back on the
    same port."""

    def __init__(self, seen: Seen, host: str = "127.0.0.1") -> None:
        self.seen = seen
        self.host = host  # bench/chaos/hosts.py: the client host's address in its namespace
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self.start()

    def url(self, name: str) -> str:
        return f"http://{self.host}:{self.port}{PUSH_PATH}{name}"

    def start(self) -> None:
        seen, receiver = self.seen, self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    message = json.loads(body)
                    if message.get("kind") == "unblock":
                        pid = message["data"]["promise"]["id"]
                        seen.unblock(pid, f"http://{receiver.host}:{receiver.port}{self.path}")
                with contextlib.suppress(OSError):
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self._server = Server((self.host, self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
        ).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


# --- the driver ----------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    workflow_every: float  # seconds between workflow starts
    listener_every: float  # seconds between listener promises
    stop: bool = False


class Driver:
    """The load generator; ``phase()`` starts a scenario's stream, ``quiet()`` stops new work."""

    def __init__(
        self, urls: list[str], token: str, seed: int = 7, receiver_host: str = "127.0.0.1"
    ) -> None:
        self.urls = urls
        self.headers = {"Authorization": f"Bearer {token}"}
        self.seen = Seen()
        self.receiver = Receiver(self.seen, receiver_host)
        self.rng = random.Random(seed)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="chaos-load", daemon=True)
        self.thread.start()
        self.client: httpx.AsyncClient = self.call_soon(self._client())
        self.phases: list[Phase] = []
        self.next_n = 0
        self.settling: set[str] = set()  # human promises being settled
        self.tasks: set[asyncio.Future[Any]] = set()
        self.sse_streams = [f"s{i + 1}" for i in range(len(urls))]
        self.closing = False
        self.canary_failure = ""
        self.canary_detail = ""
        background = [self._sse(stream, i) for i, stream in enumerate(self.sse_streams)]
        background += [self._humans(), self._completions(), self._poll_probe()]
        self.background = len(background)  # loops that run until close(), not work
        for coro in background:
            self.spawn(coro)

    async def _client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)
        return httpx.AsyncClient(timeout=httpx.Timeout(10.0), limits=limits, headers=self.headers)

    def call_soon[T](self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        def start() -> None:
            task = asyncio.ensure_future(coro)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

        self.loop.call_soon_threadsafe(start)

    # --- requests --------------------------------------------------------------------------------

    async def call(
        self,
        kind: str,
        data: dict[str, Any],
        port: int | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> tuple[int, Any]:
        """One envelope to one web process (round robin unless ``port`` picks one)."""
        url = self.urls[port if port is not None else self.rng.randrange(len(self.urls))]
        body = {"kind": kind, "head": {"corrId": uuid.uuid4().hex[:12]}, "data": data}
        try:
            res = await (client or self.client).post(url + "/", json=body)
            status = res.status_code
            reply = res.json().get("data") if status < 500 or status == 503 else None
        except (httpx.HTTPError, ValueError):
            status, reply = 0, None
        self.seen.request(kind, status)
        return status, reply

    async def persist(
        self, kind: str, data: dict[str, Any], done: tuple[int, ...] = (200,), limit: float = 60
    ) -> tuple[int, Any]:
        """Retry a request (as a client does) until it is answered one of ``done`` or any 4xx, or
        ``limit`` seconds pass; returns the last answer."""
        deadline = time.monotonic() + limit
        delay = 0.1
        while True:
            status, reply = await self.call(kind, data)
            if status in done or 400 <= status < 500 or time.monotonic() > deadline:
                return status, reply
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    # --- phases ----------------------------------------------------------------------------------

    def phase(self, name: str, workflow_every: float, listener_every: float) -> Phase:
        phase = Phase(name, workflow_every, listener_every)
        self.phases.append(phase)
        self.spawn(self._workflows(phase))
        self.spawn(self._listeners(phase))
        return phase

    def quiet(self, phase: Phase) -> None:
        phase.stop = True

    async def _workflows(self, phase: Phase) -> None:
        for _ in range(100_000):
            if phase.stop or self.closing:
                return
            self.next_n += 1
            self.spawn(self._start_workflow(phase.name, self.next_n))
            await asyncio.sleep(phase.workflow_every * self.rng.uniform(0.5, 1.5))

    async def _start_workflow(self, scenario: str, n: int) -> None:
        wid = f"chaos-{scenario}-wf-{n}"
        call = {"func": "chaos_flow", "args": [n], "version": 1}
        tags = {
            "resonate:origin": wid,
            "resonate:branch": wid,
            "resonate:parent": wid,
            "resonate:scope": "global",
            "resonate:target": "poll://any@chaos-a",
            "chaos:scenario": scenario,
        }
        data = {
            "id": wid,
            "timeoutAt": now_ms() + FAR_MS,
            "param": {"data": base64.b64encode(json.dumps(call).encode()).decode()},
            "tags": tags,
        }
        status, _ = await self.persist("promise.create", data, limit=30)
        if status == 200:
            with self.seen.lock:
                self.seen.workflows[wid] = (scenario, n, time.monotonic())
                self.seen.created[wid] = scenario
        else:
            with self.seen.lock:
                self.seen.unstarted[scenario] += 1

    async def _humans(self) -> None:
        """Settle every human-in-the-loop promise our workflows wait on, as an operator would."""
        for _ in range(1_000_000):
            if self.closing:
                return
            await asyncio.sleep(0.5)
            status, reply = await self.call(
                "promise.search",
                {"state": "pending", "tags": {"resonate:external": "true"}, "limit": 1000},
            )
            if status != 200 or not isinstance(reply, dict):
                continue
            for record in reply.get("promises", []):
                tags = record.get("tags") or {}
                origin = tags.get("resonate:origin", "")
                if "resonate:timer" in tags or record["id"] in self.settling:
                    continue
                with self.seen.lock:
                    found = self.seen.workflows.get(origin)
                if found is None:
                    continue
                self.settling.add(record["id"])
                self.spawn(self._settle(record["id"], found[0], {"bonus": bonus(found[1])}))

    async def _settle(self, pid: str, scenario: str, value: Any) -> None:
        data = {"id": pid, "state": "resolved", "value": encode(value)}
        status, _ = await self.persist("promise.settle", data, limit=120)
        if status == 200:
            with self.seen.lock:
                self.seen.settled[pid] = (scenario, value)

    async def _completions(self) -> None:
        """Note every workflow of ours that completed (one search per second)."""
        for _ in range(1_000_000):
            if self.closing:
                return
            await asyncio.sleep(1.0)
            for phase in list(self.phases):
                with self.seen.lock:
                    waiting = sum(
                        1
                        for wid, (s, _, _) in self.seen.workflows.items()
                        if s == phase.name and wid not in self.seen.completed
                    )
                if not waiting:
                    continue
                cursor = None
                for _ in range(100):
                    query: dict[str, Any] = {
                        "state": "resolved",
                        "tags": {"chaos:scenario": phase.name},
                        "limit": 1000,
                    }
                    if cursor:
                        query["cursor"] = cursor
                    status, reply = await self.call("promise.search", query)
                    if status != 200 or not isinstance(reply, dict):
                        break
                    with self.seen.lock:
                        for record in reply.get("promises", []):
                            if record["id"] in self.seen.workflows:
                                self.seen.completed.setdefault(
                                    record["id"], (decode(record), time.monotonic())
                                )
                    cursor = reply.get("cursor")
                    if not cursor:
                        break

    async def _listeners(self, phase: Phase) -> None:
        for i in range(100_000):
            if phase.stop or self.closing:
                return
            self.spawn(self._listened(phase.name, i))
            await asyncio.sleep(phase.listener_every * self.rng.uniform(0.5, 1.5))

    async def _listened(self, scenario: str, i: int, hold: float | None = None) -> bool:
        """A promise with a push listener and an SSE listener, settled 1-3 s later. True when
        every step was answered 200 and both unblocks are expected."""
        pid = f"chaos-{scenario}-l-{i}-{uuid.uuid4().hex[:6]}"
        create = {
            "id": pid,
            "timeoutAt": now_ms() + FAR_MS,
            "tags": {"chaos:scenario": scenario, **EXTERNAL},
        }
        status, _ = await self.persist("promise.create", create, limit=30)
        if status != 200:
            return False
        with self.seen.lock:
            self.seen.created[pid] = scenario
        stream = self.sse_streams[i % len(self.sse_streams)]
        addresses = [self.receiver.url(pid), f"poll://uni@{SSE_GROUP}/{stream}"]
        registered = []
        for address in addresses:
            status, _ = await self.persist(
                "promise.register_listener", {"awaited": pid, "address": address}, limit=30
            )
            if status == 200:
                registered.append(address)
        await asyncio.sleep(hold if hold is not None else self.rng.uniform(1.0, 3.0))
        with self.seen.lock:
            for address in registered:
                self.seen.listeners[(pid, address)] = scenario
        value = {"listened": i}
        data = {"id": pid, "state": "resolved", "value": encode(value)}
        status, _ = await self.persist("promise.settle", data, limit=120)
        if status == 200:
            with self.seen.lock:
                self.seen.settled[pid] = (scenario, value)
        return status == 200 and len(registered) == len(addresses)

    # --- SSE listeners ---------------------------------------------------------------------------

    async def _sse(self, stream: str, home: int) -> None:
        """Hold ``/poll/chaos-sse/{stream}`` on web process ``home``; when it drops, reconnect at
        once to whichever web process answers, and go back home 3 s later."""
        address = f"poll://uni@{SSE_GROUP}/{stream}"
        attempt = 0  # 0: home; each failed or dropped connection moves to the next process
        for _ in range(1_000_000):
            if self.closing:
                return
            url = self.urls[(home + attempt) % len(self.urls)] + f"/poll/{SSE_GROUP}/{stream}"
            homing = False
            try:
                async with (
                    httpx.AsyncClient(
                        timeout=httpx.Timeout(5.0, read=10.0), headers=self.headers
                    ) as client,
                    client.stream("GET", url) as res,
                ):
                    if res.status_code == 200:
                        away = attempt % len(self.urls) != 0
                        attempt = 0
                        connected = time.monotonic()
                        async for line in res.aiter_lines():
                            if away and time.monotonic() - connected > 3.0:
                                homing = True  # each web process's hub keeps being exercised
                                break
                            if not line.startswith("data:"):
                                continue
                            frame = json.loads(line[5:].strip())
                            if frame.get("kind") == "unblock":
                                self.seen.unblock(frame["data"]["promise"]["id"], address)
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            attempt = 0 if homing else attempt + 1
            await asyncio.sleep(0.2)

    async def _poll_probe(self) -> None:
        """Open a stream on each web process in turn every half second, and record its status:
        streams (re)connect during faults too (an SDK worker restarted mid-outage)."""
        for i in range(1_000_000):
            if self.closing:
                return
            port = i % len(self.urls)
            url = self.urls[port] + f"/poll/chaos-probe/p{port}"
            try:
                async with self.client.stream("GET", url) as res:
                    status = res.status_code
            except httpx.HTTPError:
                status = 0
            self.seen.request("poll", status)
            await asyncio.sleep(0.5)

    # --- a canary: is the whole service back? ----------------------------------------------------

    def canary(self, timeout: float = 5.0) -> bool:
        """Both web processes answer, and a settlement's push and SSE unblocks arrive."""

        async def run() -> bool:
            async with httpx.AsyncClient(timeout=httpx.Timeout(10.0), headers=self.headers) as own:
                return await probe(own)

        async def probe(own: httpx.AsyncClient) -> bool:
            # Its own connections: the canary does not queue behind the load's requests.
            began = time.monotonic()
            for port in range(len(self.urls)):
                status, _ = await self.call("promise.get", {"id": "chaos-canary-none"}, port, own)
                if status != 404:
                    self.canary_failure = f"web{port + 1} answered {status}"
                    return False
            i = self.rng.randrange(1 << 30)
            name = f"canary{i}"
            pid = f"chaos-{name}"
            create = {
                "id": pid,
                "timeoutAt": now_ms() + FAR_MS,
                "tags": {"chaos:canary": "1", **EXTERNAL},
            }
            status, _ = await self.call("promise.create", create, client=own)
            if status != 200:
                self.canary_failure = f"create answered {status}"
                return False
            addresses = [self.receiver.url(pid)]
            addresses += [f"poll://uni@{SSE_GROUP}/{s}" for s in self.sse_streams]
            for address in addresses:
                status, _ = await self.call(
                    "promise.register_listener", {"awaited": pid, "address": address}, client=own
                )
                if status != 200:
                    self.canary_failure = f"register_listener answered {status}"
                    return False
            data = {"id": pid, "state": "resolved", "value": encode(None)}
            status, _ = await self.call("promise.settle", data, client=own)
            if status != 200:
                self.canary_failure = f"settle answered {status}"
                return False
            settled = time.monotonic()
            deadline = settled + timeout
            while time.monotonic() < deadline:
                with self.seen.lock:
                    missing = [a for a in addresses if not self.seen.unblocks.get((pid, a))]
                    arrived = [min(self.seen.unblocks[(pid, a)]) for a in addresses if not missing]
                if not missing:
                    self.canary_detail = (
                        f"requests {settled - began:.1f}s, unblocks after "
                        + ", ".join(f"{max(0.0, at - settled):.1f}s" for at in arrived)
                        + " (push, SSE streams)"
                    )
                    return True
                await asyncio.sleep(0.05)
            self.canary_failure = f"no unblock within {timeout:.0f}s at {missing}"
            return False

        try:
            return self.call_soon(run(), timeout=timeout + 30)
        except (TimeoutError, RuntimeError):
            return False

    def close(self) -> None:
        self.closing = True

        async def finish() -> None:
            for task in list(self.tasks):
                task.cancel()
            await asyncio.sleep(0.1)
            await self.client.aclose()

        with contextlib.suppress(Exception):
            self.call_soon(finish(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.receiver.stop()
