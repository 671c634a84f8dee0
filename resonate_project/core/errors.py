"""Typed refusals. A service or handler that refuses a request raises one of these before its
first write, so nothing changed; each edge maps them to its own shape (the envelope to
``{status, message}``, the resource API to its error body naming ``field``, the admin to a
message, the CLI to its exit status).
"""

from __future__ import annotations

import re

import msgspec


class ProtocolError(Exception):
    """A request the protocol refuses: ``status`` (400, 403, 404, 409, 422), the message the wire
    carries, and the request field it is about when there is one."""

    status = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidRequest(ProtocolError):
    status = 400


class Forbidden(ProtocolError):
    status = 403


class NotFound(ProtocolError):
    status = 404


class Conflict(ProtocolError):
    status = 409


class Unprocessable(ProtocolError):
    status = 422


def refusal(status: int, message: str, field: str | None = None) -> ProtocolError:
    """The typed error for ``status``."""
    cls = {403: Forbidden, 404: NotFound, 409: Conflict, 422: Unprocessable}.get(status)
    error = (cls or InvalidRequest)(message, field=field)
    if cls is None:
        error.status = status
    return error


# msgspec ends a validation message with the path it is about (`$.param.headers[...]`); a
# request type's own check (``__post_init__``) starts its message with the field in backticks.
_PATH = re.compile(r" - at `\$\.?([^`]*)`$")
_LEADING = re.compile(r"^`([^`]+)`")


def invalid(exc: msgspec.ValidationError, prefix: str = "") -> InvalidRequest:
    """An ``InvalidRequest`` for a request that did not convert to its wire type, naming the
    field (``prefix`` + its wire path) when msgspec's message gives one."""
    message = str(exc)
    field: str | None = None
    if (m := _PATH.search(message)) and m.group(1):
        field = m.group(1).replace("[...]", "")
    elif m := _LEADING.match(message):
        field = m.group(1)
    if field is not None and prefix:
        field = f"{prefix}.{field}"
    return InvalidRequest(message, field=field)
