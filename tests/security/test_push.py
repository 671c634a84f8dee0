"""HTTP push at the trust boundary: where it may go (at registration, and again on the resolved IP
when it is sent), no redirects, credentials only to their own host, bounded response bodies, a
dead destination that cannot hold up a healthy one, and dead letters (kept, listed, re-sent).

Every request goes to a server the test starts on 127.0.0.1 (port 0), allowed explicitly in that
test's settings. Drains run on the test's thread; the receivers record what they saw, so the
assertions are about what arrived and in which order, never about how long it took.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db.models import Model
from django.test import Client, override_settings
from django.urls import reverse

from outbox import delivery
from outbox.models import PUSH_Q, Message
from outbox.push import drain_push
from promises.models import Callback, Listener, Promise
from resonate_project.core.clock import now_ms
from resonate_project.engine import outbox as enqueue
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import FAR, Api

TARGET = "resonate:target"
EXTERNAL = {"resonate:external": "true"}
PRIVATE = "http://10.0.0.1/hook"
PRIVATE_REFUSAL = (
    "address http://10.0.0.1/hook is a private address; allow it with RESONATE_PUSH_ALLOWED"
)
# A failed attempt is not due again within the test's drain unless the test says otherwise.
BASE = {
    "PUSH_ALLOWED": "127.0.0.1",
    "PUSH_TIMEOUT_MS": 5_000,
    "IN_FLIGHT_MS": 30_000,
    "PUSH_BACKOFF_BASE_MS": 600_000,
    "PUSH_BACKOFF_MAX_MS": 600_000,
}


@contextlib.contextmanager
def push_settings(**overrides: Any) -> Iterator[None]:
    with override_settings(RESONATE={**BASE, **overrides}):
        yield


# --- receivers ----------------------------------------------------------------------------------


@dataclass
class Got:
    path: str
    headers: dict[str, str]
    body: bytes


Answer = Callable[[BaseHTTPRequestHandler, "Receiver"], None]


def ok(handler: BaseHTTPRequestHandler, receiver: Receiver) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", "2")
    handler.end_headers()
    handler.wfile.write(b"{}")


class Receiver:
    """An HTTP server on 127.0.0.1 recording each POST, then answering with ``answer``."""

    def __init__(self, answer: Answer = ok, on_request: Callable[[], None] | None = None) -> None:
        self.got: list[Got] = []
        self.written = 0
        self.answered = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.got.append(Got(self.path, headers, body))
                if on_request is not None:
                    on_request()
                try:
                    answer(self, outer)
                except OSError:
                    pass  # the pusher hung up, as it may
                finally:
                    outer.answered.set()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class Dead:
    """Accepts connections and never answers; counts connections, and those the pusher closed
    (a request that ran into its timeout)."""

    def __init__(self) -> None:
        self.accepted = 0
        self.closed = 0
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port: int = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self._conns.append(conn)
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while conn.recv(65536):
                pass
        with self._lock:
            self.closed += 1

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return self.accepted, self.closed

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self._sock.close()
        for conn in self._conns:
            with contextlib.suppress(OSError):
                conn.close()


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    started: list[Receiver] = []

    def start(answer: Answer = ok, on_request: Callable[[], None] | None = None) -> Receiver:
        started.append(Receiver(answer, on_request))
        return started[-1]

    yield start
    for r in started:
        r.close()


def snapshot() -> dict[str, list[dict[str, Any]]]:
    models: tuple[type[Model], ...] = (Promise, Task, Callback, Listener, Message, Schedule)
    return {
        m.__name__: [dict(row) for row in m._default_manager.order_by("pk").values()]
        for m in models
    }


def target(api: Api, id: str, address: str) -> Message:
    res = api("promise.create", now=now_ms(), id=id, timeoutAt=FAR, tags={TARGET: address})
    assert res.status == 200, res.data
    return Message.objects.get(key=id)


def unblock(id: str, address: str, now: int | None = None) -> str:
    """An unblock row written as a settlement writes it (also for addresses registration would
    refuse now: rows written before the policy, or under another PUSH_ALLOWED)."""
    enqueue.unblock({"id": id, "state": "resolved"}, address, now_ms() if now is None else now)
    return f"{id}:notify:{address}"


# --- registration -------------------------------------------------------------------------------


@dataclass
class Inner:
    status: int
    data: Any


def fence_create(api: Api, version: int, tags: dict[str, str]) -> Inner:
    """task.fence wrapping a promise.create: the refusal is the inner status."""
    action = {"kind": "promise.create", "data": {"id": "child", "timeoutAt": FAR, "tags": tags}}
    res = api("task.fence", id="wf", version=version, action=action)
    assert res.status == 200, res.data
    inner = res.data["action"]
    return Inner(inner["head"]["status"], inner["data"])


ENTRY_POINTS: dict[str, Callable[[Api, int], Any]] = {
    "promise.register_listener": lambda api, _: api(
        "promise.register_listener", awaited="ext", address=PRIVATE
    ),
    "promise.create": lambda api, _: api(
        "promise.create", id="p", timeoutAt=FAR, tags={TARGET: PRIVATE}
    ),
    "task.create": lambda api, _: api(
        "task.create",
        pid="w",
        ttl=60_000,
        action={
            "kind": "promise.create",
            "data": {"id": "t", "timeoutAt": FAR, "tags": {TARGET: PRIVATE}},
        },
    ),
    "task.fence promise.create": lambda api, version: fence_create(api, version, {TARGET: PRIVATE}),
    "schedule.create": lambda api, _: api(
        "schedule.create",
        id="s",
        cron="* * * * *",
        promiseId="s-{{.timestamp}}",
        promiseTimeout=60_000,
        promiseTags={TARGET: PRIVATE},
    ),
}


@pytest.mark.parametrize("kind", list(ENTRY_POINTS))
def test_every_entry_point_refuses_a_private_push_address_naming_it(api: Api, kind: str) -> None:
    assert api("promise.create", id="ext", timeoutAt=FAR, tags=EXTERNAL).status == 200
    data = {"id": "wf", "timeoutAt": FAR, "tags": {TARGET: "poll://any@g"}}
    held = api("task.create", pid="w", ttl=60_000, action={"kind": "promise.create", "data": data})
    assert held.status == 200, held.data
    version = held.data["task"]["version"]
    call = ENTRY_POINTS[kind]
    with push_settings(PUSH_ALLOWED=""):
        before = snapshot()
        res = call(api, version)
        assert res.status == 400, res.data
        assert PRIVATE_REFUSAL in res.data
        assert snapshot() == before
    with push_settings(PUSH_ALLOWED="10.0.0.0/8"):
        assert call(api, version).status == 200


def test_the_resource_api_names_the_refused_target(db: Any, client: Client) -> None:
    with push_settings(PUSH_ALLOWED=""):
        res = client.post(
            "/api/promises",
            {"id": "p", "timeoutAt": FAR, "tags": {TARGET: "http://169.254.169.254/latest"}},
            content_type="application/json",
        )
    assert res.status_code == 400
    error = res.json()["error"]
    assert error["field"] == "tags.resonate:target"
    assert "http://169.254.169.254/latest is a link-local address" in error["message"]
    assert not Promise.objects.exists()


@pytest.mark.parametrize("address", ["poll://foo@g", "poll://uni@g", "http://localhost:8000/"])
def test_undeliverable_listener_addresses_are_400(api: Api, address: str) -> None:
    assert api("promise.create", id="ext", timeoutAt=FAR, tags=EXTERNAL).status == 200
    with push_settings(PUSH_ALLOWED=""):
        res = api("promise.register_listener", awaited="ext", address=address)
    assert res.status == 400
    assert res.data.startswith(f"address {address} ")
    assert not Listener.objects.exists()


# --- send time ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "why"),
    [
        ("localhost", "localhost resolved to 127.0.0.1, a loopback address"),
        ("127.0.0.1", "is a loopback address"),
    ],
)
def test_the_resolved_ip_is_checked_when_sending(
    db: Any, receivers: Callable[..., Receiver], host: str, why: str
) -> None:
    receiver = receivers()
    key = unblock("p", receiver.url(host=host))
    with push_settings(PUSH_ALLOWED="192.0.2.1, hooks.example.com"):
        assert drain_push(100) == 1
    assert receiver.got == []  # nothing was sent
    row = Message.objects.get(key=key)
    assert row.attempts == 1
    assert row.dead_at is None
    assert row.last_error.startswith(f"refused: address {receiver.url(host=host)}")
    assert why in row.last_error
    assert row.last_error.endswith("allow it with RESONATE_PUSH_ALLOWED")


def test_an_allowed_ip_is_reached_through_a_name_resolving_to_it(
    db: Any, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers()
    key = unblock("p", receiver.url(host="localhost"))
    with push_settings(PUSH_ALLOWED="127.0.0.1"):  # the IP, not the name
        assert drain_push(100) == 1
    assert [g.headers["host"] for g in receiver.got] == [f"localhost:{receiver.port}"]
    assert not Message.objects.filter(key=key).exists()


def test_a_redirect_is_a_failed_attempt_and_is_not_followed(
    api: Api, receivers: Callable[..., Receiver]
) -> None:
    elsewhere = receivers()

    def redirect(handler: BaseHTTPRequestHandler, receiver: Receiver) -> None:
        handler.send_response(302)
        handler.send_header("Location", elsewhere.url("/stolen"))
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    first = receivers(redirect)
    with push_settings():
        target(api, "job", first.url())
        assert drain_push(100) == 1
    assert len(first.got) == 1
    assert elsewhere.got == []
    row = Message.objects.get(key="job")
    assert row.attempts == 1
    assert row.last_error == (
        f"HTTP 302: redirect not followed (Location: {elsewhere.url('/stolen')})"
    )


def test_credentials_go_to_their_own_destination_only(
    api: Api, receivers: Callable[..., Receiver]
) -> None:
    a, b, c = receivers(), receivers(), receivers()
    credentials = {f"127.0.0.1:{a.port}": "Bearer for-a", "LOCALHOST": "Bearer for-localhost"}
    with push_settings(PUSH_ALLOWED="127.0.0.1, localhost", PUSH_CREDENTIALS=credentials):
        target(api, "to-a", a.url())
        target(api, "to-b", b.url())
        target(api, "to-c", c.url(host="localhost"))
        assert drain_push(100) == 3
    assert [g.headers.get("authorization") for g in a.got] == ["Bearer for-a"]
    assert [g.headers.get("authorization") for g in b.got] == [None]
    assert [g.headers.get("authorization") for g in c.got] == ["Bearer for-localhost"]
    assert not Message.objects.exists()


def test_credentials_may_be_json_text(api: Api, receivers: Callable[..., Receiver]) -> None:
    a = receivers()
    with push_settings(PUSH_CREDENTIALS='{"127.0.0.1": "Token t"}'):
        target(api, "to-a", a.url())
        drain_push(100)
    assert [g.headers.get("authorization") for g in a.got] == ["Token t"]


BIG = 64 * 1024 * 1024
CAP = 1024


def test_a_response_body_is_read_only_up_to_the_cap(
    api: Api, receivers: Callable[..., Receiver]
) -> None:
    def huge(handler: BaseHTTPRequestHandler, receiver: Receiver) -> None:
        handler.send_response(500)
        handler.send_header("Content-Length", str(BIG))
        handler.end_headers()
        chunk = b"x" * 65536
        while receiver.written < BIG:
            handler.wfile.write(chunk)
            receiver.written += len(chunk)

    receiver = receivers(huge)
    with push_settings(PUSH_MAX_RESPONSE_BYTES=CAP):
        target(api, "job", receiver.url())
        assert drain_push(100) == 1
    assert receiver.answered.wait(30)
    assert Message.objects.get(key="job").last_error == "HTTP 500: " + "x" * 200
    # It sent more than the cap before the pusher hung up, and far less than the whole body.
    assert CAP < receiver.written < BIG


def test_a_dead_destination_does_not_hold_up_a_healthy_one(
    db: Any, receivers: Callable[..., Receiver]
) -> None:
    dead = Dead()
    seen_by_healthy: list[tuple[int, int]] = []
    healthy = receivers(on_request=lambda: seen_by_healthy.append(dead.counts()))
    try:
        t0 = now_ms()
        # Four messages for the dead destination, all due before the healthy one, which would
        # have waited a whole timeout behind them in a round of four.
        for i in range(4):
            unblock(f"d{i}", dead.url(), now=t0 - 100 + i)
        unblock("h", healthy.url(), now=t0)
        with push_settings(PUSH_CONCURRENCY=4, PUSH_PER_HOST_CONCURRENCY=2, PUSH_TIMEOUT_MS=1_500):
            drain_push(100)
        # The healthy message arrived while no request to the dead destination had ended yet
        # (within one attempt's timeout), and the dead one never had more than its two slots.
        assert len(seen_by_healthy) == 1
        accepted, closed = seen_by_healthy[0]
        assert (accepted <= 2, closed) == (True, 0)
        assert not Message.objects.filter(key__startswith="h:").exists()
        # Two attempts timed out; the dead destination then cooled: its other two messages were
        # put back untried, due with the failed ones' retry.
        assert dead.counts()[0] == 2
        rows = {m.key[:2]: m for m in Message.objects.filter(key__startswith="d")}
        tried = [rows["d0"], rows["d1"]]
        assert [(m.attempts, m.last_error) for m in tried] == [
            (1, "TimeoutError: no answer within 1500 ms")
        ] * 2
        retry_at = max(m.next_attempt_at for m in tried)
        assert [(rows[k].attempts, rows[k].last_error) for k in ("d2", "d3")] == [(0, "")] * 2
        assert {rows[k].next_attempt_at for k in ("d2", "d3")} <= {m.next_attempt_at for m in tried}
        assert retry_at > now_ms()
    finally:
        dead.close()


# --- dead letters -------------------------------------------------------------------------------


def failing(handler: BaseHTTPRequestHandler, receiver: Receiver) -> None:
    handler.send_response(503)
    handler.send_header("Content-Length", "4")
    handler.end_headers()
    handler.wfile.write(b"down")


def test_after_max_attempts_a_message_is_dead_lettered_and_kept(
    api: Api, receivers: Callable[..., Receiver]
) -> None:
    receiver = receivers(failing)
    with push_settings(PUSH_MAX_ATTEMPTS=3, PUSH_BACKOFF_BASE_MS=0, PUSH_BACKOFF_MAX_MS=0):
        target(api, "job", receiver.url())
        drain_push(100)
        assert len(receiver.got) == 3
        row = Message.objects.get(key="job")
        assert (row.attempts, row.last_error) == (3, "HTTP 503: down")
        assert row.dead_at is not None
        assert drain_push(100) == 0  # never claimed again
        assert len(receiver.got) == 3


def dead_letter_due(now: int) -> None:
    """Fail every due push message once with one attempt allowed: each becomes a dead letter."""
    with push_settings(PUSH_MAX_ATTEMPTS=1):
        for item in delivery.claim(PUSH_Q, now, 100):
            assert delivery.fail(item, now, "HTTP 500: boom") is True


def test_after_max_age_a_message_is_dead_lettered(db: Any) -> None:
    with push_settings(PUSH_MAX_ATTEMPTS=0, PUSH_MAX_AGE_MS=10_000, PUSH_BACKOFF_BASE_MS=1_000):
        key = unblock("p", "https://hooks.example.com/x", now=1_000)
        now, attempts = 1_000, []
        while True:
            (item,) = delivery.claim(PUSH_Q, now, 10)
            attempts.append(now)
            if delivery.fail(item, now, "HTTP 500"):
                break
            now = Message.objects.get(key=key).next_attempt_at
        # Backoff 1s, 2s, 4s, then the last attempt is moved up to the age bound.
        assert attempts == [1_000, 2_000, 4_000, 8_000, 11_000]
        row = Message.objects.get(key=key)
        assert (row.dead_at, row.attempts) == (11_000, 5)
        assert delivery.claim(PUSH_Q, 10**12, 10) == []


def test_with_both_bounds_off_failures_never_dead_letter(db: Any) -> None:
    with push_settings(PUSH_MAX_ATTEMPTS=0, PUSH_MAX_AGE_MS=0, PUSH_BACKOFF_BASE_MS=0):
        unblock("p", "https://hooks.example.com/x", now=1_000)
        for now in range(1_000, 1_000 + 100 * 10**9, 10**9):
            (item,) = delivery.claim(PUSH_Q, now, 10)
            assert delivery.fail(item, now, "HTTP 500") is False
        assert Message.objects.get().dead_at is None


def test_a_newer_upsert_of_the_key_revives_a_dead_letter(db: Any) -> None:
    enqueue.execute("job", 0, "https://w.example/run", 1_000)
    dead_letter_due(1_000)
    assert Message.objects.get(key="job").dead_at == 1_000
    enqueue.execute("job", 1, "https://w.example/run", 2_000)
    row = Message.objects.get(key="job")
    assert (row.dead_at, row.attempts, row.last_error, row.version) == (None, 0, "", 1)
    assert [c.key for c in delivery.claim(PUSH_Q, 2_000, 10)] == ["job"]


def test_the_admin_lists_dead_letters_and_resend_revives_one(db: Any) -> None:
    now = now_ms()
    key = unblock("p", "https://hooks.example.com/x", now=now)
    dead_letter_due(now)
    live_key = unblock("q", "https://hooks.example.com/y", now=now)
    user = User.objects.create_user("op", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["view_message", "act_on_message"])
    )
    client = Client()
    client.force_login(user)
    changelist = reverse("admin:outbox_message_changelist")

    listing = client.get(changelist, {"dead": "yes"})
    assert [m.key for m in listing.context["cl"].result_list] == [key]
    assert "dead letter" in listing.content.decode()
    assert "HTTP 500: boom" in listing.content.decode()
    alive = client.get(changelist, {"dead": "no"})
    assert [m.key for m in alive.context["cl"].result_list] == [live_key]

    page = client.post(
        changelist,
        {"action": "resend_messages", "_selected_action": [key], "index": "0"},
        follow=True,
    )
    assert page.status_code == 200
    row = Message.objects.get(key=key)
    assert (row.dead_at, row.attempts, row.last_error) == (None, 0, "")
    assert row.next_attempt_at >= now
    assert key in [c.key for c in delivery.claim(PUSH_Q, now_ms(), 10)]


def test_the_api_lists_dead_letters_and_resend_revives_one(db: Any, client: Client) -> None:
    enqueue.execute("job", 0, "https://w.example/run", 1_000)
    dead_letter_due(1_000)
    enqueue.execute("other", 0, "https://w.example/run", 1_000)

    res = client.get("/api/outbox", {"state": "dead"})
    assert res.status_code == 200
    (record,) = res.json()["results"]
    assert record == {
        "key": "job",
        "kind": "execute",
        "address": "https://w.example/run",
        "createdAt": 1_000,
        "attempts": 1,
        "nextAttemptAt": 1_000,
        "lastError": "HTTP 500: boom",
        "task": {"id": "job", "version": 0},
        "deadAt": 1_000,
    }
    live = client.get("/api/outbox", {"state": "live"}).json()["results"]
    assert [r["key"] for r in live] == ["other"]

    res = client.post("/api/outbox/job/resend")
    assert res.status_code == 200
    body = res.json()
    assert "deadAt" not in body
    assert (body["attempts"], body["lastError"]) == (0, "")
    assert client.get("/api/outbox", {"state": "dead"}).json()["results"] == []
    assert Message.objects.get(key="job").dead_at is None

    res = client.post("/api/outbox/nothing/resend")
    assert res.status_code == 404
    assert res.json()["error"]["field"] == "key"
