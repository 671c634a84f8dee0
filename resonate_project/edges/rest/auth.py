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


# What a staff session needs, as in the admin: reading a model's rows needs its "view"
# permission; anything that changes state (a create, an action, a DELETE) needs the operator
# permission the admin's actions need (``act_on_<model>``, or the view's ``act_permission``).
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def needed_permission(method: str, view: Any) -> str | None:
    """The ``app_label.codename`` a staff session needs, None for views on no model (the schema
    and the docs: any staff session)."""
    model = getattr(view, "permission_model", None)
    if model is None:
        queryset = getattr(view, "queryset", None)
        model = None if queryset is None else queryset.model
    if model is None:
        return None
    meta = model._meta
    if method in SAFE_METHODS:
        return f"{meta.app_label}.view_{meta.model_name}"
    return getattr(view, "act_permission", None) or f"{meta.app_label}.act_on_{meta.model_name}"


class ApiAccess(BasePermission):
    message = (
        "a credential (Authorization: Bearer) or a staff session with the admin's permission "
        "for this is required"
    )

    def has_permission(self, request: Request, view: Any) -> bool:
        if not auth_required():
            return True
        if isinstance(request.user, ApiClient):
            return True
        user = request.user
        if not (user and user.is_active and user.is_staff):
            return False
        needed = needed_permission(request.method or "GET", view)
        return needed is None or bool(user.has_perm(needed))
