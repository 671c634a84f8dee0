"""The checks each HTTP surface makes before it acts.

``POST /`` refuses what a web page in a browser could forge without a CORS preflight: a body that
is not ``application/json`` (a form or ``text/plain`` POST, or a body with no type at all) and a
request whose ``Origin`` is another site's. ``/poll/{group}/{id}`` needs a credential allowed to
stream ``group`` whenever auth is required.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

import jwt
from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse

from resonate_project.access.auth import (
    auth_required,
    authenticate,
    bearer,
    credential_refusal,
)
from resonate_project.access.credentials import hash_token, is_service_token
from resonate_project.access.principal import AuthError, Principal
from resonate_project.core.clock import now_ms
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import Response

log = logging.getLogger("resonate.gate")

JSON_TYPES = ("application/json",)


def forgeable(content_type: str | None, origin: str | None, host: str | None) -> Response | None:
    """None when ``POST /`` may proceed, else the 400/403 refusing a browser-forgeable request."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in JSON_TYPES:
        shown = media or "none"
        return Response(400, f"Content-Type must be application/json (got {shown})")
    if origin is not None and not same_or_allowed_origin(origin, host):
        return Response(403, f"requests from origin {origin!r} are not allowed")
    return None


def request_refusal(path: str, query: str, authorization: str | None) -> str | None:
    """The 400 message for a request no surface may act on, read from its path, raw query
    string and Authorization header alone (before routing, before anything is read or stored),
    else None: a NUL, which PostgreSQL's text refuses (a 500 where SQLite finds nothing; no id
    can hold one), or more than one credential."""
    if "\x00" in path:
        return "the path may not contain NUL (%00)"
    if "%00" in query or "\x00" in query:
        name = nul_parameter(query)
        where = "the query string" if name is None else f"the query parameter {name!r}"
        return f"{where} may not contain NUL (%00)"
    return credential_refusal(authorization)


def nul_parameter(query: str) -> str | None:
    """The name of the first query parameter whose name or value holds a NUL, if any."""
    for name, value in parse_qsl(query, keep_blank_values=True):
        if "\x00" in name or "\x00" in value:
            return name.replace("\x00", "%00")
    return None


def same_or_allowed_origin(origin: str, host: str | None) -> bool:
    allowed = {o.strip().rstrip("/") for o in resonate_settings().ALLOWED_ORIGINS.split(",")}
    if origin.rstrip("/") in allowed - {""}:
        return True
    if origin == "null" or not host:
        return False
    return urlsplit(origin).netloc.lower() == host.strip().lower()


def _refusal(exc: AuthError | None, status: int, message: str) -> HttpResponse:
    response = JsonResponse({"error": message}, status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="resonate"'
    return response


def poll_principal(request: HttpRequest) -> Principal | None:
    """Raises AuthError (401) when auth is required and the credential is missing or bad."""
    return authenticate(bearer(request.headers.get("Authorization")), now_ms())


@dataclass(frozen=True, slots=True)
class PollGrant:
    """Who may stream, for as long as the credential holds: ``owner`` names it (a principal's
    name), ``credential`` is a service credential's token hash (revocable), ``expires_at`` a
    JWT's expiry in ms."""

    owner: str
    credential: str | None = None
    expires_at: int | None = None


def check_poll(request: HttpRequest, group: str) -> HttpResponse | None:
    """``GET /poll/{group}/{id}``: None when the request may stream ``group``, else the 401/403
    response to send, or 503 while the database cannot be reached."""
    access = poll_access(request, group)
    return access if isinstance(access, HttpResponse) else None


def poll_access(request: HttpRequest, group: str) -> HttpResponse | PollGrant | None:
    """:func:`check_poll`, with the grant (None: auth is not required) when the request may
    stream. Synchronous (a service credential is looked up in the database)."""
    try:
        principal = poll_principal(request)
    except AuthError as exc:
        return _refusal(exc, 401, str(exc))
    except (OperationalError, InterfaceError) as exc:
        # Restarting or unreachable: the worker's stream should simply reconnect (as POST /).
        log.warning("/poll/: database unavailable: %s", exc)
        connection.close_if_unusable_or_obsolete()
        unavailable = JsonResponse({"error": "database unavailable; retry"}, status=503)
        unavailable["Retry-After"] = "1"
        return unavailable
    if principal is None:
        return None
    if not principal.may_stream(group):
        return _refusal(None, 403, f"this credential may not stream group {group!r}")
    return _grant(principal.name, bearer(request.headers.get("Authorization")) or "")


def _grant(owner: str, token: str) -> PollGrant:
    if is_service_token(token):
        return PollGrant(owner, credential=hash_token(token))
    # A JWT that authenticate() verified: only its expiry is read here.
    exp = jwt.decode(token, options={"verify_signature": False}).get("exp")
    return PollGrant(owner, expires_at=int(exp * 1000) if isinstance(exp, int | float) else None)


async def acheck_poll(request: HttpRequest, group: str) -> HttpResponse | PollGrant | None:
    """:func:`poll_access` for async views; no thread hop when auth is not required."""
    if not auth_required():
        return None
    return await sync_to_async(poll_access)(request, group)
