"""JWTs as the reference server accepts them (``head.auth`` or ``Authorization: Bearer``):
asymmetric signatures only (RS/PS/ES/EdDSA; never HS* or ``none``), ``exp`` required, ``iss`` and
``aud`` checked when configured. Claims: ``role: "admin"``, ``prefix`` (every id a request names
must start with it) and our ``groups`` (the poll groups the bearer may stream and address) and
``push`` (the hosts its http(s) addresses may name)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from resonate_project.access.principal import AuthError, Principal
from resonate_project.core.conf import resonate_settings
from resonate_project.core.principal import push_hosts_of

RSA_ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"]
EC_ALGORITHMS = ["ES256", "ES384", "ES512"]


class JwtConfigError(ValueError):
    pass


@cache
def _load_key(configured: str) -> tuple[Any, tuple[str, ...]]:
    """The configured public key and the algorithms its type allows (so a token can never pick
    an algorithm of another key type, e.g. HS256 keyed with the public PEM)."""
    text = configured.strip()
    if not text.startswith("-----BEGIN"):
        try:
            text = Path(text).read_text()
        except OSError as exc:
            raise JwtConfigError(f"JWT_PUBLIC_KEY: cannot read {configured!r}: {exc}") from exc
    try:
        key = load_pem_public_key(text.encode())
    except ValueError as exc:
        raise JwtConfigError(f"JWT_PUBLIC_KEY is not a PEM public key: {exc}") from exc
    if isinstance(key, rsa.RSAPublicKey):
        return key, tuple(RSA_ALGORITHMS)
    if isinstance(key, ec.EllipticCurvePublicKey):
        return key, tuple(EC_ALGORITHMS)
    if isinstance(key, ed25519.Ed25519PublicKey | ed448.Ed448PublicKey):
        return key, ("EdDSA",)
    raise JwtConfigError(f"JWT_PUBLIC_KEY has an unsupported key type {type(key).__name__}")


def check_config() -> str | None:
    """None when JWTs can be verified (or none are configured), else what is wrong."""
    configured = resonate_settings().JWT_PUBLIC_KEY
    if not configured:
        return None
    try:
        _load_key(configured)
    except JwtConfigError as exc:
        return str(exc)
    return None


def verify(token: str) -> Principal:
    conf = resonate_settings()
    if not conf.JWT_PUBLIC_KEY:
        raise AuthError("JWTs are not accepted by this server (no JWT_PUBLIC_KEY configured)")
    try:
        key, algorithms = _load_key(conf.JWT_PUBLIC_KEY)
    except JwtConfigError as exc:
        raise AuthError("JWTs cannot be verified: the server's JWT_PUBLIC_KEY is invalid") from exc
    options: Any = {"require": ["exp"], "verify_aud": bool(conf.JWT_AUDIENCE)}
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=list(algorithms),
            issuer=conf.JWT_ISSUER or None,
            audience=conf.JWT_AUDIENCE or None,
            options=options,
        )
    except jwt.ExpiredSignatureError as exc:
        raise AuthError("token expired") from exc
    except jwt.InvalidIssuerError as exc:
        raise AuthError("token issuer not accepted") from exc
    except jwt.InvalidAudienceError as exc:
        raise AuthError("token audience not accepted") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise AuthError(f"token lacks the {exc.claim!r} claim") from exc
    except jwt.InvalidAlgorithmError as exc:
        raise AuthError("token algorithm not accepted") from exc
    except jwt.InvalidTokenError as exc:
        raise AuthError("invalid token") from exc
    return principal_of(claims)


def principal_of(claims: dict[str, Any]) -> Principal:
    prefix = claims.get("prefix", "")
    groups = claims.get("groups")
    if not isinstance(prefix, str):
        raise AuthError("token claim 'prefix' must be a string")
    if groups is not None and not (
        isinstance(groups, list) and all(isinstance(g, str) for g in groups)
    ):
        raise AuthError("token claim 'groups' must be a list of strings")
    push = claims.get("push")
    if push is not None and not (isinstance(push, list) and all(isinstance(h, str) for h in push)):
        raise AuthError("token claim 'push' must be a list of host names")
    group_set = None if groups is None else frozenset(groups)
    sub = claims.get("sub")
    return Principal(
        name=f"jwt:{sub}" if isinstance(sub, str) else "jwt",
        admin=claims.get("role") == "admin",
        prefix=prefix,
        groups=group_set,
        push_hosts=push_hosts_of(push, group_set),
    )
