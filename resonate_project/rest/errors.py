"""One error shape for the resource API, decided in one place:

    {"error": {"status": 400, "message": "...", "field": "timeoutAt"}}

``field`` names the offending request field (dotted for nested ones, e.g. ``param.headers``) and
is ``null`` when no single field is at fault. DRF validation errors report their first error;
protocol refusals keep the handler's status and message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from django.core.exceptions import PermissionDenied, TooManyFieldsSent
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import set_rollback

API_PREFIX = "/api/"


def error_body(status: int, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"status": status, "message": message, "field": field}}


class ProtocolError(exceptions.APIException):
    """A handler's refusal (400, 403, 404, 409, 422), passed through with its status."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(detail=message)
        self.status_code = status
        self.field = field


# msgspec reports the path (`$.data.param.headers[...]`); the request types' own checks start
# with the field in backticks; handler refusals start with the field's name.
_PATH = re.compile(r"`\$\.data\.([^`]+)`")
_LEADING = re.compile(r"^(?:invalid data: )?`([^`]+)`")


def field_of(message: str, fields: Iterable[str]) -> str | None:
    """The request field a protocol message is about, if it names one."""
    if m := _PATH.search(message):
        return m.group(1).replace("[...]", "")
    if m := _LEADING.match(message):
        return m.group(1)
    first = message.split(" ", 1)[0]
    return first if first in set(fields) else None


def first_error(detail: Any, path: tuple[str, ...] = ()) -> tuple[str | None, str]:
    """The first message of a DRF error detail and the dotted path of the field it is about."""
    if isinstance(detail, dict) and detail:
        key, value = next(iter(detail.items()))
        if key != api_settings.NON_FIELD_ERRORS_KEY:
            path = (*path, str(key))
        return first_error(value, path)
    if isinstance(detail, list) and detail:
        return first_error(detail[0], path)
    return (".".join(path) or None), str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's ``EXCEPTION_HANDLER``: every API exception in the one shape (others propagate)."""
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, TooManyFieldsSent):  # e.g. a thousand ?tag= filters
        exc = exceptions.ParseError(str(exc))
    if not isinstance(exc, exceptions.APIException):
        return None
    headers = {}
    if auth_header := getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = auth_header
    if wait := getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(wait))
    if isinstance(exc, ProtocolError):
        field, message = exc.field, str(exc.detail)
    elif isinstance(exc, exceptions.ValidationError):
        field, message = first_error(exc.detail)
    else:
        field, message = None, str(exc.detail)
    set_rollback()
    return Response(error_body(exc.status_code, message, field), exc.status_code, headers=headers)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: no route matched (e.g. ``/api/nothing``)."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse(error_body(404, "no such resource"), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``."""
    if request.path.startswith(API_PREFIX):
        return JsonResponse(error_body(500, "internal server error"), status=500)
    return defaults.server_error(request)
