"""Whether ``manage.py serve`` may listen on an address (docs/how-to/production.md#deployment).

Loopback is the development default and needs nothing. Any other address is reachable by someone
else, so it needs a real ``SECRET_KEY`` (the admin's sessions are signed with it) and an explicit
``RESONATE_AUTH``: ``required``, or ``off`` for an open server on purpose. Addresses are
classified as literals: a name other than ``localhost`` counts as non-loopback and is never
resolved.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from django.core.checks.security.base import (
    SECRET_KEY_INSECURE_PREFIX,
    SECRET_KEY_MIN_LENGTH,
    SECRET_KEY_MIN_UNIQUE_CHARACTERS,
)


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 (bracketed or not, IPv4-mapped included) and ``localhost``."""
    name = host.strip().lower()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def weak_secret_key(key: str) -> bool:
    """Django's own test (security.W009): the development key fails it."""
    return (
        len(key) < SECRET_KEY_MIN_LENGTH
        or len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS
        or key.startswith(SECRET_KEY_INSECURE_PREFIX)
    )


@dataclass(frozen=True)
class BindDecision:
    refusals: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def decide_bind(host: str, *, auth: str, secret_key: str, allowed_hosts: list[str]) -> BindDecision:
    """Every reason to refuse ``host`` (serve exits before binding) and every warning to print."""
    if is_loopback(host):
        return BindDecision()
    refusals = []
    warnings = []
    if weak_secret_key(secret_key):
        refusals.append(
            f"refusing to serve on {host}: SECRET_KEY is the development key or too weak; "
            "set DJANGO_SECRET_KEY to 50 or more random characters."
        )
    if auth == "":
        refusals.append(
            f"refusing to serve on {host} (not loopback) with RESONATE_AUTH unset: set "
            "RESONATE_AUTH=required to authenticate POST /, /poll/ and /api/, or "
            "RESONATE_AUTH=off to serve them open on purpose."
        )
    elif auth == "off":
        warnings.append(
            f"WARNING: serving on {host} with RESONATE_AUTH=off: anyone who can reach this "
            "address can create, settle and claim promises and tasks."
        )
    elif auth != "required":
        refusals.append(f"RESONATE_AUTH={auth!r} is neither 'required' nor 'off'.")
    if all(is_loopback(name) for name in allowed_hosts):
        warnings.append(
            f"WARNING: ALLOWED_HOSTS is {allowed_hosts}: requests for any other host name are "
            "refused (400); list the names clients use in DJANGO_ALLOWED_HOSTS."
        )
    return BindDecision(tuple(refusals), tuple(warnings))
