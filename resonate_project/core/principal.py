"""Who is asking, once a credential has been checked: the same shape for a JWT and a service
credential, so every surface applies one set of rules. Pure data: what it may *read* is decided in
``engine.scope``, what it may *name* in ``access.rules``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """``admin`` may do anything (the debug surface included). Otherwise every id a request names
    must start with ``prefix`` ("" = any id), every read returns only ids under it, ``/poll/``
    streams and ``poll://`` addresses may use only the ``groups`` listed (``None`` = any group),
    and ``http(s)://`` addresses only the hosts in ``push_hosts`` (``None`` = any host the push
    policy allows). A credential limited to groups gets ``push_hosts`` empty unless it lists
    some: a tenant confined to its streams is confined in what it sends, too."""

    name: str
    admin: bool = False
    prefix: str = ""
    groups: frozenset[str] | None = None
    push_hosts: frozenset[str] | None = None
    credential_id: int | None = None

    def may_name(self, id: str) -> bool:
        return self.admin or id.startswith(self.prefix)

    def may_stream(self, group: str) -> bool:
        return self.admin or self.groups is None or group in self.groups

    def may_push_to(self, host: str) -> bool:
        if self.admin or self.push_hosts is None:
            return True
        host = host.lower().rstrip(".")
        return any(
            host == allowed or (allowed.startswith("*.") and host.endswith(allowed[1:]))
            for allowed in self.push_hosts
        )

    @property
    def restricted(self) -> bool:
        """Whether any read on its behalf must be narrowed (a prefix to keep to)."""
        return not self.admin and bool(self.prefix)


def push_hosts_of(
    listed: Iterable[str] | None, groups: frozenset[str] | None
) -> frozenset[str] | None:
    """A principal's push hosts: those listed; none listed means any host for a principal that
    may use any group and no host for one limited to groups."""
    hosts = frozenset(h.lower().rstrip(".") for h in listed or ())
    if hosts:
        return hosts
    return None if groups is None else frozenset()
