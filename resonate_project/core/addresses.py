"""The address grammar (spec HEAD) and where HTTP push may go. Pure: no database, no DNS.

Deliverable addresses are ``poll://uni@{group}/{id}``, ``poll://any@{group}``,
``poll://any@{group}/{id}`` and ``http(s)://`` URLs. A push URL is refused, unless
``PUSH_ALLOWED`` lists it, when its host is a loopback, link-local, private, shared (CGNAT),
multicast, reserved or otherwise non-global IP (also as an IPv4-mapped, 6to4, NAT64 or
IPv4-compatible IPv6 address), an IPv4 address spelled other than as a dotted quad, or a
loopback or cloud metadata host name. Registration checks the address as written
(:func:`push_refusal`); the push drain checks it again and then every IP its host resolves to
(:func:`ip_refusal`), connecting only to IPs that passed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from ipaddress import (
    IPv4Address,
    IPv4Network,
    IPv6Address,
    IPv6Network,
    ip_address,
    ip_network,
)
from typing import Any
from urllib.parse import urlsplit

type IP = IPv4Address | IPv6Address
type Network = IPv4Network | IPv6Network

# --- poll addresses -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PollAddress:
    mode: str  # "uni" or "any"
    group: str
    id: str | None


def parse_poll(address: str) -> PollAddress | None:
    """``poll://uni@{group}/{id}``, ``poll://any@{group}`` or ``poll://any@{group}/{id}``;
    case-sensitive (no URL parser lowercases the group)."""
    if not address.startswith("poll://"):
        return None
    mode, sep, rest = address[len("poll://") :].partition("@")
    if not sep or mode not in ("uni", "any") or not rest:
        return None
    group, slash, stream_id = rest.partition("/")
    if not group or (mode == "uni" and not stream_id):
        return None
    return PollAddress(mode, group, stream_id if slash and stream_id else None)


def poll_route(address: str) -> str | None:
    """What an SSE hub claims a message by (the ``poll_route`` column, written with the row): the
    group of an anycast address (``poll://any@g``, ``poll://any@g/id``), ``g/id`` of a unicast one
    (``poll://uni@g/id``), None for any other address. A stream ``(g, id)`` takes the routes
    ``stream_routes(g, id)``; a group never contains ``/``, so the two kinds never collide."""
    poll = parse_poll(address)
    if poll is None:
        return None
    return poll.group if poll.mode == "any" else f"{poll.group}/{poll.id}"


def stream_routes(group: str, stream_id: str) -> tuple[str, str]:
    """The routes of the messages a stream ``(group, stream_id)`` may take."""
    return group, f"{group}/{stream_id}"


def is_push(address: str) -> bool:
    return address.startswith(("http://", "https://"))


# --- addresses claimed from the database ---------------------------------------------------------

# ``django-tasks://{backend}/{queue}``: the target of a task enqueued through Django's Tasks
# framework (``tasks_app.backends``). Its worker (``manage.py resonate worker``) shares the
# database and claims due tasks from it, so no ``execute`` message is ever written for it: one
# would reach no SSE stream or push destination and wait in the outbox forever, and a
# ``poll://any@{queue}`` target would hand Django calls to SDK workers of a same-named group.
DATABASE_SCHEME = "django-tasks://"


def database_target(backend: str, queue: str) -> str:
    return f"{DATABASE_SCHEME}{backend}/{queue}"


def is_claimed_from_database(address: str | None) -> bool:
    return address is not None and address.startswith(DATABASE_SCHEME)


# --- the allowlist (PUSH_ALLOWED) ---------------------------------------------------------------

ALLOW_HINT = "allow it with RESONATE_PUSH_ALLOWED"
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")


@dataclass(frozen=True)
class Allowlist:
    """``PUSH_ALLOWED``: exact host names, ``*.suffix`` wildcards (subdomains only) and CIDRs (a
    bare IP is its /32 or /128)."""

    hosts: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[Network, ...] = ()

    def allows_name(self, host: str) -> bool:
        host = _norm(host)
        return host in self.hosts or host.endswith(self.suffixes)

    def allows_ip(self, ip: IP) -> bool:
        mapped = ip.ipv4_mapped if isinstance(ip, IPv6Address) else None
        return any(
            candidate in net
            for net in self.networks
            for candidate in (ip, mapped)
            if candidate is not None and candidate.version == net.version
        )


def _norm(host: str) -> str:
    return host.lower().rstrip(".")


@cache
def parse_allowed(raw: str) -> Allowlist:
    """Parse ``PUSH_ALLOWED`` (comma-separated); ValueError names a malformed entry."""
    hosts: set[str] = set()
    suffixes: list[str] = []
    networks: list[Network] = []
    for item in raw.split(","):
        entry = _norm(item.strip())
        if not entry:
            continue
        if entry.startswith("*.") and _NAME.match(entry[2:]):
            suffixes.append(entry[1:])
            continue
        try:
            networks.append(ip_network(entry.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        if _NAME.match(entry) and not _numeric_host(entry):
            hosts.add(entry)
            continue
        raise ValueError(
            f"PUSH_ALLOWED entry {item.strip()!r} is not a host name, *.wildcard, IP or CIDR"
        )
    return Allowlist(frozenset(hosts), tuple(suffixes), tuple(networks))


# --- outbound credentials (PUSH_CREDENTIALS) ----------------------------------------------------


def parse_credentials(raw: str | dict[str, str]) -> dict[str, str]:
    """``PUSH_CREDENTIALS``: ``{"host" or "host:port": "Authorization header value"}`` as JSON
    text or a dict; keys are matched case-insensitively. ValueError says what is wrong."""
    return _parse_credentials(raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True))


@cache
def _parse_credentials(raw: str) -> dict[str, str]:
    if not raw.strip():
        return {}
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"PUSH_CREDENTIALS is not valid JSON: {exc}") from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError('PUSH_CREDENTIALS must map host names to header values: {"host": "..."}')
    return {_norm(k): v for k, v in value.items()}


def credential_for(credentials: dict[str, str], host: str, port: int | None) -> str | None:
    """The ``Authorization`` value for this destination: ``host:port`` first, then ``host``."""
    host = _norm(host)
    if port is not None:
        shown = f"[{host}]" if ":" in host else host
        found = credentials.get(f"{shown}:{port}")
        if found is not None:
            return found
    return credentials.get(host)


# --- classification ------------------------------------------------------------------------------

_CGNAT = IPv4Network("100.64.0.0/10")
_THIS_NETWORK = IPv4Network("0.0.0.0/8")
_PRIVATE_V4 = (
    IPv4Network("10.0.0.0/8"),
    IPv4Network("172.16.0.0/12"),
    IPv4Network("192.168.0.0/16"),
)
_NAT64 = IPv6Network("64:ff9b::/96")
_COMPAT = IPv6Network("::/96")
_ULA = IPv6Network("fc00::/7")

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.azure.internal",
        "metadata.tencentyun.com",
        "metadata.platformequinix.com",
        "metadata.packet.net",
    }
)


def _ipv4_refusal(ip: IPv4Address) -> str | None:
    if ip in _THIS_NETWORK:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip in _CGNAT:
        return "a shared (CGNAT) address"
    if ip.is_reserved:
        return "a reserved address"
    if any(ip in net for net in _PRIVATE_V4):
        return "a private address"
    if not ip.is_global:
        return "a special-purpose address"
    return None


def _embedded_ipv4(ip: IPv6Address) -> tuple[IPv4Address, str] | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, "IPv4-mapped"
    if ip.sixtofour is not None:
        return ip.sixtofour, "6to4"
    if ip in _NAT64:
        return IPv4Address(int(ip) & 0xFFFFFFFF), "NAT64"
    if ip in _COMPAT and int(ip) > 1:
        return IPv4Address(int(ip) & 0xFFFFFFFF), "IPv4-compatible"
    return None


def ip_refusal(ip: IP) -> str | None:
    """Why pushing to ``ip`` is refused unless allowed ("a private address"), or None."""
    if isinstance(ip, IPv4Address):
        return _ipv4_refusal(ip)
    if embedded := _embedded_ipv4(ip):
        inner, how = embedded
        if reason := _ipv4_refusal(inner):
            return f"{reason} ({how})"
        if how == "NAT64":  # a public IPv4 address reached from an IPv6-only network
            return None
        if how in ("IPv4-mapped", "IPv4-compatible"):
            return f"an {how} address (write it as {inner})"
    if ip.is_unspecified:
        return "an unspecified address"
    if ip.is_loopback:
        return "a loopback address"
    if ip.is_link_local:
        return "a link-local address"
    if ip.is_site_local:
        return "a site-local address"
    if ip.is_multicast:
        return "a multicast address"
    if ip in _ULA:
        return "a private (unique local) address"
    if ip.is_reserved:
        return "a reserved address"
    if not ip.is_global:
        return "a special-purpose address"
    return None


def _numeric_host(host: str) -> bool:
    """WHATWG's "ends in a number": such a host is an IPv4 address, however it is spelled."""
    last = host.rstrip(".").rsplit(".", 1)[-1]
    return bool(re.fullmatch(r"[0-9]+|0x[0-9a-f]*", last))


def _legacy_ipv4(host: str) -> IPv4Address | None:
    """The address a legacy spelling (``2130706433``, ``0177.1``, ``0x7f.0.0.1``) means."""
    parts = host.rstrip(".").split(".")
    if len(parts) > 4:
        return None
    numbers = []
    for part in parts:
        if re.fullmatch(r"0x[0-9a-f]*", part):
            numbers.append(int(part[2:] or "0", 16))
        elif re.fullmatch(r"0[0-7]+", part):
            numbers.append(int(part, 8))
        elif re.fullmatch(r"[0-9]+", part):
            numbers.append(int(part))
        else:
            return None
    *head, last = numbers
    if any(n > 255 for n in head) or last >= 256 ** (5 - len(numbers)):
        return None
    value = last
    for i, n in enumerate(head):
        value += n << (8 * (3 - i))
    return IPv4Address(value)


def host_refusal(host: str, allowed: Allowlist, *, names: bool = True) -> str | None:
    """Why a push to ``host`` (as written in the URL, brackets stripped) is refused before any
    DNS lookup, or None. A name that passes is checked again on its resolved IPs at send time,
    which passes ``names=False``: there the IPs a name resolves to decide, not the name."""
    name = _norm(host)
    if not name:
        return "has no host"
    if allowed.allows_name(name):
        return None
    try:
        ip = ip_address(name)
    except ValueError:
        if ":" in name:
            return "has an invalid IPv6 host"
        if _numeric_host(name):
            legacy = _legacy_ipv4(name)
            if legacy is None:
                return "has an invalid IPv4 host"
            if str(legacy) != name:
                return f"spells the IPv4 address {legacy} unusually (write it as {legacy})"
            ip = legacy
        elif names and (name in LOOPBACK_NAMES or name.endswith(".localhost")):
            return f"names a loopback host; {ALLOW_HINT}"
        elif names and name in METADATA_NAMES:
            return f"names a cloud metadata service; {ALLOW_HINT}"
        else:
            return None
    if allowed.allows_ip(ip):
        return None
    reason = ip_refusal(ip)
    return f"is {reason}; {ALLOW_HINT}" if reason else None


def resolved_refusal(host: str, ip: IP, allowed: Allowlist) -> str | None:
    """Why a push may not connect to ``ip``, which ``host`` resolved to, or None."""
    if allowed.allows_name(host) or allowed.allows_ip(ip):
        return None
    reason = ip_refusal(ip)
    return f"{host} resolved to {ip}, {reason}; {ALLOW_HINT}" if reason else None


# Characters URL parsers disagree about (WHATWG reads a backslash as /; some drop tabs).
_UNSAFE = re.compile(r"[\s\\\x00-\x1f\x7f]")


def push_refusal(address: str, allowed: Allowlist, *, names: bool = True) -> str | None:
    """Why push to this ``http(s)://`` address is refused as written, or None (no DNS)."""
    if _UNSAFE.search(address):
        return "may not contain spaces, backslashes or control characters"
    try:
        parts = urlsplit(address)
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return "is not a valid URL"
    if "@" in parts.netloc:
        return "may not carry credentials (configure PUSH_CREDENTIALS)"
    return host_refusal(parts.hostname or "", allowed, names=names)


def address_refusal(address: str, allowed: Allowlist) -> str | None:
    """Why ``address`` may not be registered (the whole 400 message), or None."""
    if is_push(address):
        reason = push_refusal(address, allowed)
        return None if reason is None else f"address {address} {reason}"
    if address.startswith("poll://"):
        if parse_poll(address) is None:
            return (
                f"address {address} is not poll://uni@{{group}}/{{id}}, poll://any@{{group}} "
                "or poll://any@{group}/{id}"
            )
        return None
    return "address must start with http://, https:// or poll://"
