"""One error shape for the resource API, decided in one place:

    {"error": {"status": 400, "message": "...", "field": "timeoutAt"}}

``field`` names the offending request field (dotted for nested ones, e.g. ``param.headers``) and
is ``null`` when no single field is at fault. DRF validation errors report their first error;
protocol refusals keep the handler's status and message. The site's own refusals before any
view (a body over ``MAX_BODY_BYTES``, a request ``access.gate.request_refusal`` refuses), its
404s and its 500s are answered here too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.core.exceptions import PermissionDenied, TooManyFieldsSent
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware
from django.views import defaults
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import set_rollback

from resonate_project.access.gate import nul_parameter, request_refusal
from resonate_project.core.errors import ProtocolError

API_PREFIX = "/api/"


def error_body(status: int, message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"status": status, "message": message, "field": field}}


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
    if isinstance(exc, ProtocolError):  # a service's refusal: its status, message and field
        set_rollback()
        return Response(error_body(exc.status, exc.message, exc.field), exc.status)
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
    if isinstance(exc, exceptions.ValidationError):
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


def body_too_large(limit: int) -> tuple[int, bytes]:
    """The 413 for a body over ``MAX_BODY_BYTES`` on a path other than ``POST /`` (which answers
    in the protocol's shape), sent by the ASGI and WSGI edges before Django reads it."""
    message = f"request body exceeds {limit} bytes (MAX_BODY_BYTES)"
    return 413, json.dumps(error_body(413, message)).encode()


def _malformed(request: HttpRequest) -> HttpResponse | None:
    message = request_refusal(
        request.path, request.META.get("QUERY_STRING", ""), request.headers.get("Authorization")
    )
    if message is None:
        return None
    if request.path.startswith(API_PREFIX):
        field = None if "\x00" in request.path else nul_parameter(request.META["QUERY_STRING"])
        return JsonResponse(error_body(400, message, field), status=400)
    return JsonResponse({"error": message}, status=400)


@sync_and_async_middleware
def refuse_malformed(get_response: Callable[[HttpRequest], Any]) -> Callable[[HttpRequest], Any]:
    """Middleware, first in ``MIDDLEWARE``: a request ``access.gate.request_refusal`` refuses
    (a NUL in its path or query, more than one credential) is answered 400 before sessions,
    CSRF, routing or any view sees it, on every path (a NUL reached PostgreSQL as a 500)."""
    if iscoroutinefunction(get_response):

        async def amiddleware(request: HttpRequest) -> HttpResponse:
            refused = _malformed(request)
            if refused is not None:
                return refused
            response: HttpResponse = await get_response(request)
            return response

        return amiddleware

    def middleware(request: HttpRequest) -> HttpResponse:
        refused = _malformed(request)
        if refused is not None:
            return refused
        response: HttpResponse = get_response(request)
        return response

    return middleware
