"""Whose rows a read may return: the one place every read made on a caller's behalf is narrowed.

A request names ids, and ``access.rules`` refuses any outside the caller's prefix. But the server
also reads by values the client chose that are not ids it names: a ``resonate:branch`` tag
(preload), an ``idPrefix``, a cursor, a tag filter, a REST query string. Those reads are narrowed
here, by the caller's prefix, whatever value led to them:

- ``acting_as(principal)`` is entered by the edges around a handler (the envelope, on its threads
  and on the event loop); ``caller()`` is who that is, None for a trusted caller (auth off, an
  internal step, an admin action).
- ``visible(qs, field)`` narrows a queryset to the caller's ids; ``prefix_condition`` is the same
  condition for the statements written once in ``engine.rows``.
- ``guard(data)`` is the last look at a reply before it is encoded for a narrowed caller: a
  record outside its prefix that some read let through is dropped from a list (and logged as the
  bug it is), and a reply whose own record is outside it becomes a 403.

Prefixes compare exactly, case included, on both databases: Django's ``startswith`` is ``LIKE``,
which SQLite folds case for, so the lookup here is ``GLOB`` there (``LIKE`` with escapes on
PostgreSQL, where it is exact and uses the ``_like`` index).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db.models import CharField, Lookup, QuerySet, TextField
from django.db.models.lookups import StartsWith

from resonate_project.core.principal import Principal

log = logging.getLogger("resonate.scope")

_caller: ContextVar[Principal | None] = ContextVar("resonate_caller", default=None)
_UNSET: Any = object()


@contextmanager
def acting_as(principal: Principal | None) -> Iterator[None]:
    """Every read inside is made on ``principal``'s behalf (None: unrestricted)."""
    token = _caller.set(principal)
    try:
        yield
    finally:
        _caller.reset(token)


def caller() -> Principal | None:
    return _caller.get()


def prefix_of(principal: Principal | None = _UNSET) -> str:
    """The prefix reads are narrowed to ("" for none): ``principal``'s, else the caller's."""
    p = _caller.get() if principal is _UNSET else principal
    return p.prefix if p is not None and p.restricted else ""


def may_see(id: str, principal: Principal | None = _UNSET) -> bool:
    return id.startswith(prefix_of(principal))


def glob_pattern(prefix: str) -> str:
    """A SQLite ``GLOB`` pattern matching exactly the strings starting with ``prefix``."""
    escaped = "".join(f"[{c}]" if c in "*?[" else c for c in prefix)
    return escaped + "*"


def like_pattern(prefix: str) -> str:
    """A ``LIKE … ESCAPE '\\'`` pattern matching exactly the strings starting with ``prefix``."""
    escaped = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped + "%"


PREFIXED = "prefixed"


class Prefixed(Lookup):
    """``field__prefixed=p``: the value starts with ``p``, compared exactly on every database."""

    lookup_name = PREFIXED
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> Any:
        if connection.vendor == "sqlite":
            lhs, lhs_params = self.process_lhs(compiler, connection)
            return f"{lhs} GLOB %s", (*lhs_params, glob_pattern(str(self.rhs)))
        return StartsWith(self.lhs, self.rhs).as_sql(compiler, connection)


CharField.register_lookup(Prefixed)
TextField.register_lookup(Prefixed)


def prefixed[Q: QuerySet[Any]](qs: Q, field: str, prefix: str | None) -> Q:
    """``qs`` narrowed to rows whose ``field`` starts with ``prefix`` (a client's ``idPrefix``)."""
    return qs.filter(**{f"{field}__{PREFIXED}": prefix}) if prefix else qs


def visible[Q: QuerySet[Any]](qs: Q, field: str = "pk", principal: Principal | None = _UNSET) -> Q:
    """``qs`` narrowed to the ids ``principal`` (default: the caller) may see, ``field`` holding
    the protocol id (``pk`` for promises, tasks and schedules)."""
    return prefixed(qs, field, prefix_of(principal))


def prefix_condition(column: str, vendor: str) -> str:
    """SQL for "``column`` starts with the parameter ``prefix_param`` gives"."""
    return f"{column} GLOB %s" if vendor == "sqlite" else f"{column} LIKE %s ESCAPE '\\'"


def prefix_param(prefix: str, vendor: str) -> str:
    return glob_pattern(prefix) if vendor == "sqlite" else like_pattern(prefix)


def _is_record(value: Any) -> bool:
    """A promise or task record (``state``) or a schedule record (``cron``)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("id"), str)
        and ("state" in value or "cron" in value)
    )


def _outside(value: Any, prefix: str) -> bool:
    return _is_record(value) and not value["id"].startswith(prefix)


def guard(data: Any, principal: Principal | None = _UNSET) -> tuple[Any, bool]:
    """``data`` with every record (a dict with an ``id`` and a ``state`` or ``cron``) outside
    the prefix removed from its lists, and whether one was found where it could not be removed
    (the reply must then be refused). Unrestricted callers get ``data`` untouched."""
    prefix = prefix_of(principal)
    if not prefix:
        return data, False
    return _guard(data, prefix)


def _guard(data: Any, prefix: str) -> tuple[Any, bool]:
    if isinstance(data, dict):
        if _outside(data, prefix):
            return data, True
        leaked = False
        for key, value in data.items():
            if isinstance(value, dict | list):
                data[key], bad = _guard(value, prefix)
                leaked = leaked or bad
        return data, leaked
    if isinstance(data, list):
        kept = []
        leaked = False
        for item in data:
            if _outside(item, prefix):
                log.error(
                    "scope: dropped %r from a reply to a caller limited to %r", item["id"], prefix
                )
                continue
            item, bad = _guard(item, prefix)
            leaked = leaked or bad
            kept.append(item)
        return kept, leaked
    return data, False
