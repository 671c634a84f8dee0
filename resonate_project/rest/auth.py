"""Who may use the resource API.

With no API token configured the resource API is as open as the protocol endpoint ``POST /`` (it
offers nothing the envelope does not). With ``RESONATE['API_TOKEN']`` set, a request needs
``Authorization: Bearer <token>`` or the session of an active staff user (the admin's users, for
the browsable Swagger UI).
"""

from __future__ import annotations

import hmac
from typing import Any

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from promises.conf import resonate_settings


def api_token() -> str:
    """``RESONATE['API_TOKEN']`` (env ``RESONATE_API_TOKEN``); empty means open."""
    return resonate_settings().API_TOKEN


class ApiClient:
    """The bearer of the API token: not a Django user, but authenticated."""

    is_authenticated = True
    is_active = True
    is_anonymous = False
    is_staff = False
    username = "api-token"
    pk = None

    def __str__(self) -> str:
        return self.username


class BearerTokenAuthentication(BaseAuthentication):
    keyword = b"bearer"

    def authenticate(self, request: Request) -> tuple[ApiClient, str] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        token = api_token()
        if not token:
            return None  # no token configured: the API is open and the header means nothing
        if len(parts) != 2 or not hmac.compare_digest(parts[1], token.encode()):
            raise AuthenticationFailed("invalid bearer token")
        return ApiClient(), "api-token"

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ApiAccess(BasePermission):
    message = "a bearer token or a staff session is required"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not api_token():
            return True
        if isinstance(request.user, ApiClient):
            return True
        user = request.user
        return bool(user and user.is_active and user.is_staff)
