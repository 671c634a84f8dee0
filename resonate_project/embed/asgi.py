"""``wrap(get_asgi_application())``: the protocol's fast path and the in-process runner.

``POST <prefix>`` (the whole protocol) is answered here, before Django's request machinery: it
uses no session, CSRF, authentication or message middleware, and under ASGI each sync middleware
hops to Django's one shared sync thread, which serialises concurrent requests. ``GET
<prefix>poll/...`` (SSE) goes through Django without the thread Django gives each request for as
long as its response lasts (see ``_stream``). Everything else goes to the wrapped application.
The prefix is read from the URLconf (where ``resonate_project.embed.urls`` is included). Bodies
are held to ``MAX_BODY_BYTES`` on both routes, and, with ``limit_bodies`` (the standalone
server), on every path (:func:`bounded`).

For the app's lifespan (uvicorn, hypercorn and granian send its events) the wrapper also runs,
with no Celery broker configured, the internal steps (timeouts, timers, retries, schedules) and
HTTP push in threads of this process; several processes may do so at once, since every step and
drain claims its rows (``SKIP LOCKED`` on PostgreSQL, the write lock on SQLite). With a broker,
Celery beat and workers run them.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import SyncToAsync
from django.core.signals import request_finished
from django.db import connections
from django.dispatch import receiver
from django.urls import NoReverseMatch, reverse

from resonate_project.access.gate import request_refusal
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import Response
from resonate_project.edges.api import answer, refuse_http, too_large
from resonate_project.edges.envelope import respond
from resonate_project.edges.rest.errors import body_too_large
from resonate_project.engine.wake import celery_enabled
from resonate_project.runtime import embedded, traffic

ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    """The request headers by lower-cased name, a repeated one's values joined with commas as
    Django joins them (so ``credential_refusal`` reads two Authorization headers alike here and
    on every Django surface)."""
    headers: dict[str, str] = {}
    for k, v in scope["headers"]:
        name, value = k.decode("latin-1").lower(), v.decode("latin-1")
        headers[name] = f"{headers[name]},{value}" if name in headers else value
    return headers


def _refusal(scope: dict[str, Any], headers: dict[str, str]) -> str | None:
    """``access.gate.request_refusal`` (a NUL in the path, two credentials), as the Django
    surfaces make it in ``rest.errors.refuse_malformed``."""
    query = scope.get("query_string", b"").decode("latin-1")
    return request_refusal(scope["path"], query, headers.get("authorization"))


class _Gone(Exception):
    """The client went away before sending the whole body."""


async def _read_body(receive: Any, limit: int) -> bytes | None:
    """The body, or None as soon as it exceeds ``limit`` (nothing more is buffered)."""
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send(send: Any, status: int, body: bytes) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def envelope(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """One ``POST`` of an envelope, answered without Django's request machinery."""
    headers = _headers(scope)
    refused = refuse_http(headers, check_host=True)
    if refused is None and (refusal := _refusal(scope, headers)):
        refused = respond("", "", Response(400, refusal))
    if refused is not None:
        await _send(send, *refused)
        return
    try:
        body = await _read_body(receive, resonate_settings().MAX_BODY_BYTES)
    except _Gone:
        return
    if body is None:
        await _send(send, *too_large())
        return
    await _send(send, *await answer(body, headers.get("authorization")))


async def bounded(app: ASGIApp, scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``app`` with its request body held to ``MAX_BODY_BYTES``, before it authenticates or
    reads anything: a declared ``Content-Length`` over the limit is answered 413 unread, and a
    body that grows past it (chunked, or longer than declared) at its first chunk past the
    limit, after which ``app`` hears that the client left. Django's ASGI handler reads the whole
    body (spooled to a file past ``FILE_UPLOAD_MAX_MEMORY_SIZE``) before any middleware or view
    runs, so nothing inside Django can stop it sooner."""
    limit = resonate_settings().MAX_BODY_BYTES
    declared = next((v for k, v in scope["headers"] if k.lower() == b"content-length"), b"")
    if declared.isdigit() and int(declared) > limit:
        await _send(send, *body_too_large(limit))
        return
    size = 0

    async def counted() -> Any:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                await _send(send, *body_too_large(limit))
                return {"type": "http.disconnect"}
        return message

    await app(scope, counted, send)


@receiver(request_finished, dispatch_uid="resonate.close_request_thread_connections")
def close_request_thread_connections(**_: Any) -> None:
    """Close the connections of an ASGI request's own thread as the request finishes.

    Django's ASGI handler runs each sync view (the resource API, the admin, ``/ready``) in a
    thread of that request's own (asgiref's ``ThreadSensitiveContext``): a connection kept for
    ``CONN_MAX_AGE`` there is never used again and stays open, one per request, until PostgreSQL
    runs out of connections (tests/system/test_asgi_connections.py). Outside such a thread (WSGI,
    the sync test client, the protocol's own threads) this does nothing; a connection shared
    between threads or inside a transaction is left alone."""
    if SyncToAsync.thread_sensitive_context.get(None) is None:
        return
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block and not conn.allow_thread_sharing:
            conn.close()


class Resonate:
    """The wrapped application (see the module docstring). ``steps``: run the internal steps and
    push in this process; None decides at startup (yes when no ``CELERY_BROKER_URL`` is set).
    ``limit_bodies``: hold every path's body to ``MAX_BODY_BYTES`` (a host's own pages keep the
    host's limits unless it asks)."""

    def __init__(self, app: Any, *, steps: bool | None = None, limit_bodies: bool = False) -> None:
        self.app = app
        self.steps = steps
        self.limit_bodies = limit_bodies
        self._prefix: str | None = None  # "" once known to be unmounted
        self._stop: Callable[[], None] | None = None
        self._lock = threading.Lock()

    @property
    def runs_steps(self) -> bool:
        return not celery_enabled() if self.steps is None else self.steps

    def prefix(self) -> str:
        """Where the envelope is mounted, e.g. ``/resonate/`` (``/`` at the site root); "" when
        the URLconf does not include ``resonate_project.embed.urls`` (all goes to Django)."""
        if self._prefix is None:
            try:
                self._prefix = reverse("resonate-envelope")
            except NoReverseMatch:
                self._prefix = ""
        return self._prefix

    def start(self) -> None:
        """Starts this process's threads once: the request-count flusher, and the runner."""
        with self._lock:
            if self._stop is not None:
                return
            traffic.start()
            self._stop = embedded.start() if self.runs_steps else (lambda: None)

    def stop(self) -> None:
        with self._lock:
            stop, self._stop = self._stop, None
        if stop is not None:
            stop()
            traffic.stop()

    async def lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await asyncio.to_thread(self.start)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await asyncio.to_thread(self.stop)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _stream(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """SSE through Django (middleware, URL routing, the view and its access check) minus
        the thread Django's ``__call__`` gives each request: its ``ThreadSensitiveContext`` runs
        the sync middleware on a thread of the request's own, kept until the response ends, i.e.
        for as long as the stream is open. Here the middleware runs on asgiref's one shared sync
        thread, only while the stream is set up, and an open stream is a coroutine
        (``outbox.hub``)."""
        await self.app.handle(scope, receive, send)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        if scope["type"] == "http" and (prefix := self.prefix()):
            path = scope["path"]
            root = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            if scope["method"] == "POST" and path in (prefix, prefix.rstrip("/")):
                await envelope(scope, receive, send)
                return
            if scope["method"] == "GET" and path.startswith(f"{prefix}poll/"):
                if refusal := _refusal(scope, _headers(scope)):  # before a stream is stored
                    await _send(send, 400, json.dumps({"error": refusal}).encode())
                    return
                await bounded(self._stream, scope, receive, send)
                return
        if scope["type"] == "http" and self.limit_bodies:
            await bounded(self.app, scope, receive, send)
            return
        await self.app(scope, receive, send)


def wrap(app: Any, *, steps: bool | None = None, limit_bodies: bool = False) -> Resonate:
    """``application = wrap(get_asgi_application())`` in the host's ``asgi.py``."""
    return Resonate(app, steps=steps, limit_bodies=limit_bodies)
