"""Creating, revoking and checking service credentials (``rsn_`` tokens)."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable

from django.db import IntegrityError, transaction

from resonate_project.access.models import ServiceCredential
from resonate_project.access.principal import AuthError, Principal
from resonate_project.core.principal import push_hosts_of

TOKEN_PREFIX = "rsn_"
# last_used_at is written at most this often per credential (a write per request would cost a
# round trip and a row lock on the hot path).
LAST_USED_RESOLUTION_MS = 60_000
NAME_MAX = 100


class CredentialError(ValueError):
    pass


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def is_service_token(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX)


def credential_create(
    *,
    name: str,
    now: int,
    prefix: str = "",
    groups: Iterable[str] = (),
    push_hosts: Iterable[str] = (),
    admin: bool = False,
) -> tuple[ServiceCredential, str]:
    """A new credential and its token (returned once; only its hash is kept)."""
    name = name.strip()
    if not name or len(name) > NAME_MAX:
        raise CredentialError(f"name must be 1 to {NAME_MAX} characters")
    group_list = sorted({g for g in groups})
    if any(not g or "/" in g for g in group_list):
        raise CredentialError("groups must be non-empty and may not contain '/'")
    host_list = sorted({h.strip().lower().rstrip(".") for h in push_hosts})
    if any(not h or "/" in h or "@" in h for h in host_list):
        raise CredentialError("push hosts must be host names (or *.domain), not URLs")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            credential = ServiceCredential.objects.create(
                name=name,
                token_hash=hash_token(token),
                prefix=prefix,
                groups=group_list,
                push_hosts=host_list,
                admin=admin,
                created_at=now,
            )
    except IntegrityError as exc:
        raise CredentialError(f"a credential named {name!r} exists already") from exc
    return credential, token


def credential_revoke(*, name: str, now: int) -> ServiceCredential:
    with transaction.atomic():
        credential = ServiceCredential.objects.select_for_update().filter(name=name).first()
        if credential is None:
            raise CredentialError(f"no credential named {name!r}")
        if credential.revoked_at is None:
            credential.revoked_at = now
            credential.save(update_fields=["revoked_at"])
    return credential


def principal_for(credential: ServiceCredential) -> Principal:
    groups = frozenset(credential.groups) if credential.groups else None
    return Principal(
        name=f"credential:{credential.name}",
        admin=credential.admin,
        prefix=credential.prefix,
        groups=groups,
        push_hosts=push_hosts_of(credential.push_hosts, groups),
        credential_id=credential.pk,
    )


def authenticate_service_token(token: str, now: int) -> Principal:
    credential = ServiceCredential.objects.filter(token_hash=hash_token(token)).first()
    if credential is None:
        raise AuthError("invalid credential")
    if credential.revoked_at is not None:
        raise AuthError("credential revoked")
    if credential.last_used_at is None or credential.last_used_at <= now - LAST_USED_RESOLUTION_MS:
        ServiceCredential.objects.filter(pk=credential.pk).update(last_used_at=now)
    return principal_for(credential)
