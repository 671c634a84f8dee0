"""One authenticator for every surface: a bearer token is a service credential (``rsn_...``) or
a JWT; ``RESONATE_AUTH`` decides whether one is needed at all."""

from __future__ import annotations

from resonate_project.access import credentials, tokens
from resonate_project.access.principal import AuthError, Principal
from resonate_project.core.conf import resonate_settings

REQUIRED = "required"
OFF = "off"
MODES = ("", REQUIRED, OFF)


def auth_required() -> bool:
    return resonate_settings().AUTH == REQUIRED


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def credential_refusal(authorization: str | None) -> str | None:
    """The 400 message for a request with more than one credential header, else None. Repeated
    headers reach every surface as one value joined with commas (Django joins them so, and
    ``embed.asgi`` the same way for ``POST /``), and a bearer token never has a comma (RFC
    6750's token68), so a comma is the sign: otherwise one surface would read one credential
    and another the other."""
    if authorization is not None and "," in authorization:
        return "more than one Authorization header (or a comma in one): send one credential"
    return None


def authenticate(token: str | None, now: int) -> Principal | None:
    """The principal a request acts as: None (unrestricted) when auth is not required; raises
    :class:`AuthError` (401) when it is and the token is missing or invalid."""
    if not auth_required():
        return None
    if not token:
        raise AuthError(
            "authentication required: send a JWT or service credential as "
            "head.auth or Authorization: Bearer"
        )
    if credentials.is_service_token(token):
        return credentials.authenticate_service_token(token, now)
    return tokens.verify(token)
