"""The ASGI application.

``POST /`` (the whole protocol) is answered here, before Django's request machinery: it uses no
session, CSRF, authentication or message middleware, and under ASGI each sync middleware hops to
Django's one shared sync thread, which serialises concurrent requests. Everything else (SSE
``/poll/``, the admin, ``/api/``, probes) goes to Django. Sites that embed the apps instead mount
``resonate_project.api.envelope`` as an ordinary view.
"""

import asyncio
import os
from typing import Any

from django.core.asgi import get_asgi_application

from resonate_project.observability import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")

tracing.configure()  # before the handler is built: it instruments Django's middleware
django_application = get_asgi_application()

from outbox import traffic  # noqa: E402  (needs the app registry ready)
from resonate_project.api import answer, refuse_http, too_large  # noqa: E402
from resonate_project.core.conf import resonate_settings  # noqa: E402  (needs the app registry ready)


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    """The request headers we read (the last of a repeated one wins), lower-cased names."""
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


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


async def poll_application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``GET /poll/...`` through Django (middleware, URL routing, the view and its access check)
    minus the thread Django's ``__call__`` gives each request: its ``ThreadSensitiveContext`` runs
    the sync middleware on a thread of the request's own, kept until the response ends, i.e. for
    as long as the stream is open. Here the middleware runs on asgiref's one shared sync thread,
    only while the stream is set up, and an open stream is a coroutine (``outbox.hub``)."""
    await django_application.handle(scope, receive, send)


async def lifespan(receive: Any, send: Any) -> None:
    """Each web process (``serve`` runs uvicorn with the lifespan on) starts the thread that writes
    its request counts for the operator overview, and flushes them once more when it stops."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            traffic.start()
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await asyncio.to_thread(traffic.stop)
            await send({"type": "lifespan.shutdown.complete"})
            return


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/":
        headers = _headers(scope)
        refused = refuse_http(headers, check_host=True)
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
        return
    if scope["type"] == "http" and scope["method"] == "GET" and scope["path"].startswith("/poll/"):
        await poll_application(scope, receive, send)
        return
    await django_application(scope, receive, send)
