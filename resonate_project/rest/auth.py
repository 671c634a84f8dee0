"""Who may use the resource API: the same authenticator as ``POST /`` and ``/poll/``.

With ``RESONATE_AUTH=required``, a request needs ``Authorization: Bearer <JWT or service
credential>`` (its prefix limits every id, as on ``POST /``) or the session of an active staff
user (the admin's users, for the browsable Swagger UI; unrestricted, like the admin). Otherwise the
API is as open as ``POST /``. The schema and the docs follow the same rule.
"""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from resonate_project.access.auth import auth_required, authenticate, bearer
from resonate_project.access.principal import AuthError, Principal
from resonate_project.core.clock import now_ms


class ApiClient:
    """The bearer of a credential: not a Django user, but authenticated as ``principal``."""

    is_authenticated = True
    is_active = True
    is_anonymous = False
    is_staff = False
    pk = None

    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self.username = principal.name

    def __str__(self) -> str:
        return self.username


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[ApiClient, str] | None:
        if not auth_required():
            return None  # the API is open and the header means nothing
        header = get_authorization_header(request).decode("latin-1")
        token = bearer(header)
        if token is None:
            if header:
                raise AuthenticationFailed("Authorization must be 'Bearer <token>'")
            return None
        try:
            principal = authenticate(token, now_ms())
        except AuthError as exc:
            raise AuthenticationFailed(str(exc)) from exc
        assert principal is not None  # auth is required
        return ApiClient(principal), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="resonate"'


def principal_of(request: Request) -> Principal | None:
    """Whom the request acts as: None is unrestricted (auth off, or a staff session)."""
    user = request.user
    return user.principal if isinstance(user, ApiClient) else None


class ApiAccess(BasePermission):
    message = "a credential (Authorization: Bearer) or a staff session is required"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not auth_required():
            return True
        if isinstance(request.user, ApiClient):
            return True
        user = request.user
        return bool(user and user.is_active and user.is_staff)
