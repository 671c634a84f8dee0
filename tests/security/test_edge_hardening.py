"""The server's edge (issue #23, findings 5, 8, 9, 13 and 15): what is refused before Django,
authentication or the database see a request. The ASGI application is driven with ASGI messages
(so what is read from the client is observable), Django surfaces with its test client, and the
HTTP server ``manage.py serve`` starts as a real process on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.urls import URLPattern

from outbox.models import Subscriber
from promises.models import Promise
from resonate_project.asgi import application
from resonate_project.edges.rest import urls as api_urls
from resonate_project.wsgi import application as wsgi_application
from tests.support.factories import FAR

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable  # the interpreter running the suite, wherever its virtualenv is
HOST = "127.0.0.1"
LIMIT = 250  # MAX_BODY_BYTES in the body tests


# --- the ASGI application, driven with messages ---------------------------------------------


def call(
    method: str, path: str, headers: list[tuple[str, str]], chunks: list[bytes], query: str = ""
) -> tuple[int, bytes, int]:
    """One request through ``resonate_project.asgi.application``; returns the status, the body
    and how many body chunks the server read. After the body the client stays connected."""
    pending = list(chunks)
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        if not pending:
            await asyncio.Event().wait()  # connected, sending nothing more
        read += 1
        return {"type": "http.request", "body": pending.pop(0), "more_body": bool(pending)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query.encode(),
        "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers],
        "server": (HOST, 8001),
        "client": (HOST, 50000),
    }
    asyncio.run(asyncio.wait_for(application(scope, receive, send), 30))
    status = sent[0]["status"]
    return status, b"".join(m.get("body", b"") for m in sent[1:]), read


JSON = [("host", "localhost:8001"), ("content-type", "application/json")]
# Every kind of path the site serves besides POST /: probes, metrics, the resource API, the
# admin, an SSE stream, and nothing at all.
PATHS = [
    ("POST", "/health"),
    ("POST", "/ready"),
    ("POST", "/metrics"),
    ("POST", "/api/promises"),
    ("POST", "/api/promises/p/settle"),
    ("POST", "/admin/login/"),
    ("GET", "/poll/workers/w1"),
    ("POST", "/nothing/here"),
]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("method", "path"), PATHS)
def test_a_declared_body_over_the_limit_is_refused_unread_on_every_path(
    method: str, path: str
) -> None:
    """Finding 5: only POST / limited its body; elsewhere a 300 MB body became a temp file
    before the 403."""
    with override_settings(RESONATE={"MAX_BODY_BYTES": LIMIT}):
        status, body, read = call(method, path, [*JSON, ("content-length", "5000")], [b"x" * 5000])
    assert (status, read) == (413, 0)
    error = json.loads(body)["error"]
    assert error["status"] == 413
    assert f"{LIMIT} bytes (MAX_BODY_BYTES)" in error["message"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("method", "path"), PATHS)
def test_a_streamed_body_is_read_no_further_than_the_limit_on_every_path(
    method: str, path: str
) -> None:
    """A chunked body (no Content-Length) is counted as it arrives: 413 at the first chunk past
    the limit, the rest never read."""
    with override_settings(RESONATE={"MAX_BODY_BYTES": LIMIT}):
        status, body, read = call(method, path, JSON, [b"x" * 100] * 50)
    assert (status, read) == (413, 3)
    assert "MAX_BODY_BYTES" in json.loads(body)["error"]["message"]


@pytest.mark.django_db(transaction=True)
def test_a_body_over_the_limit_changes_nothing_and_one_within_it_is_served() -> None:
    create = {"id": "edge-body", "timeoutAt": FAR, "param": {"data": "x" * 400}}
    big = json.dumps(create).encode()
    small = json.dumps({**create, "param": {}}).encode()
    with override_settings(RESONATE={"MAX_BODY_BYTES": LIMIT}):
        assert call("POST", "/api/promises", JSON, [big[:200], big[200:]])[0] == 413
        assert not Promise.objects.filter(id="edge-body").exists()
        length = ("content-length", str(len(small)))  # DRF reads no body without one
        status, body, _ = call("POST", "/api/promises", [*JSON, length], [small[:20], small[20:]])
    assert status == 200, body
    assert Promise.objects.filter(id="edge-body").exists()


def test_wsgi_refuses_a_declared_body_over_the_limit_unread() -> None:
    """The same limit when the site is served over WSGI (``runserver``, a WSGI server): Django
    reads the declared length, so that is refused before anything is read."""
    body = io.BytesIO(b"x" * 5000)
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/api/promises",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "8001",
        "HTTP_HOST": "localhost",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": "5000",
        "wsgi.input": body,
        "wsgi.url_scheme": "http",
    }
    started: list[str] = []
    with override_settings(RESONATE={"MAX_BODY_BYTES": LIMIT}):
        reply = b"".join(wsgi_application(environ, lambda status, headers: started.append(status)))
    assert started[0].startswith("413 ")
    assert "MAX_BODY_BYTES" in json.loads(reply)["error"]["message"]
    assert body.tell() == 0


# --- OPTIONS on the resource API (finding 8) --------------------------------------------------


def api_paths() -> list[str]:
    """Every route under /api/, with a made-up id wherever the route takes one."""
    paths = []
    for pattern in api_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        route = re.sub(r"<str:name>", "swagger-ui.css", str(pattern.pattern))
        paths.append("/api/" + re.sub(r"<\w+:\w+>", "x", route))
    return paths


# The Swagger page is HTML: it has no metadata to give (405); its assets are files.
OPTIONS_STATUS = {"/api/docs/": 405}


@pytest.mark.django_db
@pytest.mark.parametrize("path", api_paths())
def test_options_answers_200_on_every_api_route(path: str) -> None:
    """Finding 8: OPTIONS on a view that takes a POST was a 500 (DRF's metadata asked the view
    for a serializer_class it does not have), and on the Swagger page (no template for it)."""
    res = Client(raise_request_exception=False).options(path)
    assert res.status_code == OPTIONS_STATUS.get(path, 200), res.content


@pytest.mark.django_db
def test_options_needs_a_credential_when_auth_is_required() -> None:
    client = Client(raise_request_exception=False)
    with override_settings(RESONATE={"AUTH": "required"}):
        for path in api_paths():
            if "/assets/" not in path:  # the Swagger page's files are public
                assert client.options(path).status_code == 401, path


# --- a NUL in a path (finding 9) ------------------------------------------------------------

NUL_REQUESTS = [
    ("get", "/api/promises/a%00b"),
    ("post", "/api/promises/a%00b/settle"),
    ("get", "/api/tasks/a%00b"),
    ("post", "/api/tasks/a%00b/halt"),
    ("post", "/api/tasks/a%00b/continue"),
    ("get", "/api/schedules/a%00b"),
    ("delete", "/api/schedules/a%00b"),
    ("get", "/api/django-tasks/a%00b"),
    ("post", "/api/django-tasks/a%00b/cancel"),
    ("post", "/api/django-tasks/a%00b/rerun"),
    ("post", "/api/outbox/a%00b/resend"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "url"), NUL_REQUESTS)
def test_a_nul_in_an_api_path_is_a_400_naming_it(method: str, url: str) -> None:
    """Finding 9: on PostgreSQL, which refuses NUL in text, these were 500s."""
    client = Client(raise_request_exception=False)
    kwargs = {"data": "{}", "content_type": "application/json"} if method == "post" else {}
    res = getattr(client, method)(url, **kwargs)
    assert res.status_code == 400, res.content
    error = res.json()["error"]
    assert error["status"] == 400
    assert "NUL (%00)" in error["message"]


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/promises?id=a%00b", "/api/outbox?state=dead&key=a%00b"])
def test_a_nul_in_a_query_parameter_is_a_400_naming_the_parameter(url: str) -> None:
    res = Client(raise_request_exception=False).get(url)
    assert res.status_code == 400, res.content
    error = res.json()["error"]
    assert "NUL (%00)" in error["message"]
    assert error["field"] == url.rsplit("&", 1)[-1].split("?")[-1].split("=")[0]


@pytest.mark.django_db
def test_a_nul_in_an_admin_path_is_a_400(client: Client) -> None:
    client.force_login(User.objects.create_superuser("edge-admin", "a@example.com", "pw"))
    for url in ("/admin/promises/promise/a%00b/change/", "/admin/promises/promise/?q=a%00b"):
        res = client.get(url)
        assert res.status_code == 400, url
        assert "NUL (%00)" in res.json()["error"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/poll/work\x00ers/w1", "/poll/workers/w\x001"])
def test_a_nul_in_a_poll_path_is_refused_before_a_stream_is_stored(path: str) -> None:
    status, body, _ = call("GET", path, [("host", "localhost:8001")], [b""])
    assert status == 400
    assert "NUL (%00)" in json.loads(body)["error"]
    assert not Subscriber.objects.exists()
    # The same check where the site is served without the ASGI wrapper (Django's own routing).
    res = Client(raise_request_exception=False).get(path.replace("\x00", "%00"))
    assert res.status_code == 400
    assert not Subscriber.objects.exists()


# --- one credential header (finding 13) ------------------------------------------------------

TWO = [("authorization", "Bearer rsn_first"), ("authorization", "Bearer rsn_second")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("auth", ["required", "off"])
def test_two_authorization_headers_are_a_400_on_every_surface(auth: str) -> None:
    """Finding 13: POST / took the last of two Authorization headers while the Django surfaces
    joined them (a 401): one rule now, everywhere."""
    envelope = {"kind": "promise.get", "head": {"corrId": "c"}, "data": {"id": "p"}}
    with override_settings(RESONATE={"AUTH": auth}):
        status, body, read = call("POST", "/", [*JSON, *TWO], [json.dumps(envelope).encode()])
        assert (status, read) == (400, 0)
        reply = json.loads(body)
        assert reply["head"]["status"] == 400
        assert "more than one Authorization header" in reply["data"]
        for method, path in [("GET", "/api/promises"), ("GET", "/metrics"), ("GET", "/poll/g/w")]:
            status, body, _ = call(method, path, [*JSON, *TWO], [b""])
            assert status == 400, (path, body)
            assert b"more than one Authorization header" in body
    assert not Subscriber.objects.exists()


@pytest.mark.django_db
def test_a_joined_authorization_header_is_a_400_on_django_surfaces() -> None:
    """What Django makes of two headers (one value, joined with a comma) under any server."""
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION="Bearer a,Bearer b")
    res = client.get("/api/promises")
    assert res.status_code == 400
    assert "more than one Authorization header" in res.json()["error"]["message"]
    assert client.get("/poll/g/w").status_code == 400
    assert client.post("/", "{}", content_type="application/json").status_code == 400


# --- the HTTP server manage.py serve starts (finding 15) ------------------------------------

SERVER_ENV = {
    "RESONATE_MAX_HEADER_BYTES": "8192",
    "RESONATE_HEADER_TIMEOUT_MS": "1000",
    "RESONATE_KEEPALIVE_TIMEOUT_MS": "1000",
    "RESONATE_SSE_KEEPALIVE_MS": "300",
}
GET = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
WAIT = 60.0  # seconds the server may take to start on a loaded machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """``manage.py serve`` on loopback, on a SQLite file of its own, limits made small."""
    home = tmp_path_factory.mktemp("edge-server")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RESONATE_")}
    env.update(SERVER_ENV, DATABASE_URL=f"sqlite:///{home / 'db.sqlite3'}", CELERY_BROKER_URL="")
    migrate = [PYTHON, "manage.py", "migrate", "-v0"]
    subprocess.run(migrate, cwd=ROOT, env=env, check=True, timeout=300)
    port = free_port()
    argv = [PYTHON, "manage.py", "serve", "--host", HOST, "--port", str(port), "--no-embedded"]
    log = (home / "serve.log").open("wb")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert proc.poll() is None, (home / "serve.log").read_text()
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), 1) as s:
                s.sendall(GET)
                if s.recv(100).startswith(b"HTTP/1.1 200"):
                    break
            assert time.monotonic() < deadline, "manage.py serve did not start"
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        log.close()


def read_until_closed(s: socket.socket, within: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it did (seconds
    from now); fails if it is still open after ``within`` seconds."""
    start = time.monotonic()
    data = b""
    while True:
        left = start + within - time.monotonic()
        assert left > 0, f"still open after {within} s; got {data[:200]!r}"
        ready, _, _ = select.select([s], [], [], left)
        if not ready:
            continue
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            return data, time.monotonic() - start
        data += chunk


@pytest.mark.parametrize("size", [20_000, 1_000_000])
def test_serve_refuses_an_oversized_head_with_431(server: int, size: int) -> None:
    """Finding 15: a 1 MB head was read whole."""
    with socket.create_connection((HOST, server), 10) as s:
        head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * size + b"\r\n\r\n"
        with contextlib.suppress(OSError):  # the server may close before it has all of it
            s.sendall(head)
        reply, _ = read_until_closed(s, 10)
    assert reply.startswith(b"HTTP/1.1 431 "), reply[:200]
    assert b"8192 bytes (MAX_HEADER_BYTES)" in reply


def test_serve_cuts_off_a_head_sent_a_byte_at_a_time(server: int) -> None:
    """A slowloris: the head trickles in, a byte every 0.2 s, for ever; it is answered 408 and
    closed once HEADER_TIMEOUT_MS (1 s here) has passed since the connection opened."""
    with socket.create_connection((HOST, server), 10) as s:
        start = time.monotonic()
        s.sendall(b"GET /health HTTP/1.1\r\n")
        reply = b""
        for _ in range(50):  # 10 s at most
            try:
                s.sendall(b"X")
            except OSError:
                break
            ready, _, _ = select.select([s], [], [], 0.2)
            if ready:
                reply, _ = read_until_closed(s, 5)
                break
        elapsed = time.monotonic() - start
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert b"HEADER_TIMEOUT_MS" in reply
    assert 0.9 <= elapsed < 5


def test_serve_closes_a_connection_that_sends_nothing(server: int) -> None:
    with socket.create_connection((HOST, server), 10) as s:
        reply, after = read_until_closed(s, 10)
    assert reply == b""
    assert 0.9 <= after < 5


def test_serve_closes_an_idle_keep_alive_connection(server: int) -> None:
    """After a response, a kept-alive connection may idle KEEPALIVE_TIMEOUT_MS (1 s here); a
    second request within it is served on the same connection."""
    with socket.create_connection((HOST, server), 10) as s:
        for _ in range(2):
            s.sendall(GET)
            reply = b""
            while not (reply.endswith(b"}") and b'"status": "ok"' in reply):
                chunk = s.recv(65536)
                assert chunk, reply
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 200 "), reply
            time.sleep(0.3)
        rest, after = read_until_closed(s, 10)
    assert rest == b""
    assert 0.5 <= after < 3  # uvicorn alone closed it after 5 s


def test_serve_keeps_a_stream_open_past_the_head_and_idle_timeouts(server: int) -> None:
    """The head's and the idle timers stop once a request's headers are in: an SSE stream
    (its response never complete) outlives both."""
    with socket.create_connection((HOST, server), 10) as s:
        s.sendall(b"GET /poll/workers/edge HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        received = b""
        deadline = time.monotonic() + 3  # three times either timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([s], [], [], 0.5)
            if ready:
                chunk = s.recv(65536)
                assert chunk, f"closed after {received[:300]!r}"
                received += chunk
    assert received.startswith(b"HTTP/1.1 200 "), received[:300]
    assert received.count(b": keepalive") >= 3
