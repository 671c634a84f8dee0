"""Who is asking, once a credential has been checked: the same shape for a JWT and a service
credential, so every surface applies one set of rules."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Principal:
    """``admin`` may do anything (the debug surface included). Otherwise every id a request names
    must start with ``prefix`` ("" = any id), searches see only ids under it, and ``/poll/``
    streams only the ``groups`` listed (``None`` = any group)."""

    name: str
    admin: bool = False
    prefix: str = ""
    groups: frozenset[str] | None = None

    def may_name(self, id: str) -> bool:
        return self.admin or id.startswith(self.prefix)

    def may_stream(self, group: str) -> bool:
        return self.admin or self.groups is None or group in self.groups


class AuthError(Exception):
    """A missing or invalid credential: 401, with a message that says which and nothing more."""

    status = 401
