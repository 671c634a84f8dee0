"""The standalone server's ASGI application: the whole site wrapped by
``resonate_project.embed.asgi.wrap`` (``POST /`` and SSE before Django's middleware, and every
path's body held to ``MAX_BODY_BYTES``), and :class:`HttpProtocol`, the HTTP protocol ``manage.py
serve`` runs it under. ``manage.py serve`` starts the internal steps and push itself when no
broker is set (``resonate_project.runtime.embedded``)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from django.core.asgi import get_asgi_application
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from resonate_project.core.conf import resonate_settings
from resonate_project.observability import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")

tracing.configure()  # before the handler is built: it instruments Django's middleware
django_application = get_asgi_application()

from resonate_project.embed.asgi import wrap  # noqa: E402  (needs the app registry ready)

application = wrap(django_application, steps=False, limit_bodies=True)


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol (the one ``uvicorn[standard]`` picks) with the limits uvicorn
    leaves off a request's head. Its one header limit, ``h11_max_incomplete_event_size``, binds
    only its h11 protocol, and llhttp sets none: a 1 MB head was read whole. It arms no timer on
    a new connection nor while a head trickles in (its keep-alive timer runs only between
    requests, and any byte cancels it): a client sending a byte a second held a connection for
    ever. Here a head must arrive within ``HEADER_TIMEOUT_MS`` of its first byte (of the
    connection opening, for the first request; then 408 and closed) and fit in
    ``MAX_HEADER_BYTES`` (then 431), and a connection idle between requests is closed after
    ``KEEPALIVE_TIMEOUT_MS``."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        limits = resonate_settings()
        self.max_head_bytes = limits.MAX_HEADER_BYTES
        self.head_timeout = limits.HEADER_TIMEOUT_MS / 1000
        self.idle_timeout = limits.KEEPALIVE_TIMEOUT_MS / 1000
        # In parse order: True from the end of one message until the next one's headers are in.
        self.awaiting_head = True
        self.heads = 0
        # The head so far, counted twice over: the bytes of chunks that left it incomplete (a
        # header trickling in, which httptools buffers until it ends), and the URL and headers
        # the parser gave (a head that arrives within one chunk).
        self.head_bytes = 0
        self.parsed_bytes = 0
        self.head_too_large = False
        self.timer: asyncio.TimerHandle | None = None
        self.timer_is_idle = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.head_timeout, idle=False)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        awaiting, heads = self.awaiting_head, self.heads
        super().data_received(data)
        if self.transport.is_closing() or not self.awaiting_head:
            return
        if awaiting and self.heads == heads:  # all of this chunk is head (pipelining aside)
            self.head_bytes += len(data)
            if self.head_bytes > self.max_head_bytes:
                self._refuse(431, self._too_large())
                return
        if self.timer_is_idle:  # the first byte after an idle wait: the head's clock starts
            self._arm(self.head_timeout, idle=False)

    def on_url(self, url: bytes) -> None:
        self._parsed(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._parsed(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def _parsed(self, size: int) -> None:
        self.parsed_bytes += size
        if self.parsed_bytes > self.max_head_bytes:
            self.head_too_large = True
            raise ValueError("head too large")  # stops the parser: send_400_response below

    def send_400_response(self, msg: str) -> None:
        if self.head_too_large:
            self._refuse(431, self._too_large())
        else:
            super().send_400_response(msg)

    def _too_large(self) -> str:
        return f"the request line and headers exceed {self.max_head_bytes} bytes (MAX_HEADER_BYTES)"

    def on_headers_complete(self) -> None:
        self.awaiting_head = False
        self.heads += 1
        self.head_bytes = self.parsed_bytes = 0
        self._disarm()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.awaiting_head = True
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        idle = self.awaiting_head and self.cycle.response_complete
        if idle and not self.transport.is_closing():
            self._unset_keepalive_if_required()  # uvicorn's whole-second timer: ours instead
            if self.head_bytes:
                self._arm(self.head_timeout, idle=False)
            else:
                self._arm(self.idle_timeout, idle=True)

    def _arm(self, delay: float, *, idle: bool) -> None:
        self._disarm()
        self.timer_is_idle = idle
        self.timer = self.loop.call_later(delay, self._expired)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self) -> None:
        self.timer = None
        if self.transport.is_closing():
            return
        if self.head_bytes and not self.timer_is_idle:
            timeout = round(self.head_timeout * 1000)
            message = f"the request line and headers did not arrive within {timeout} ms"
            self._refuse(408, f"{message} (HEADER_TIMEOUT_MS)")
        else:
            self.transport.close()  # nothing of a request came: nobody to answer

    def _refuse(self, status: int, message: str) -> None:
        """Answer and close, without the parser: the head is not (all) there."""
        body = message.encode()
        head = [STATUS_LINE[status]]
        head += [
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        ]
        head.append(b"content-type: text/plain; charset=utf-8\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        self.transport.close()
