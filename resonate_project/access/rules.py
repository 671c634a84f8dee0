"""What a principal may do with a decoded protocol request. Every id a request names (``id``,
``awaited``, ``awaiter``, ``promiseId``, a nested action's ids, every heartbeat task id) must lie
under the principal's prefix; searches are narrowed to it (the reference server refuses them for
prefix tokens; narrowing is more useful and reveals nothing outside the prefix)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from resonate_project.access.principal import Principal
from resonate_project.core.errors import Forbidden
from resonate_project.core.protocol import Response

ID_FIELDS = frozenset({"id", "awaited", "awaiter", "promiseId"})
SEARCH_KINDS = frozenset({"promise.search", "task.search", "schedule.search"})


def named_ids(value: Any) -> Iterator[str]:
    """Every identifier a decoded request names, nested actions included."""
    if isinstance(value, msgspec.Struct):
        # The class attributes, not msgspec.structs.fields(), which re-reads the annotations
        # on every call (~250 µs a request).
        cls = type(value)
        for name, wire in zip(cls.__struct_fields__, cls.__struct_encode_fields__, strict=True):
            item = getattr(value, name)
            if wire in ID_FIELDS and isinstance(item, str):
                yield item
            else:
                yield from named_ids(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from named_ids(item)


def forbidden(message: str) -> Response:
    return Response(403, message)


def authorize(kind: str, req: Any, principal: Principal | None) -> tuple[Any, Response | None]:
    """The request to run (a search narrowed to the prefix) or the 403 that refuses it."""
    if principal is None or principal.admin:
        return req, None
    if kind in SEARCH_KINDS:
        return narrow(req, principal)
    for id in named_ids(req):
        if not principal.may_name(id):
            return req, forbidden(f"{id!r} is outside this credential's prefix")
    return req, None


def narrow(req: Any, principal: Principal) -> tuple[Any, Response | None]:
    prefix = principal.prefix
    if not prefix:
        return req, None
    asked = req.idPrefix
    if asked is None or prefix.startswith(asked):
        return msgspec.structs.replace(req, idPrefix=prefix), None
    if asked.startswith(prefix):
        return req, None
    return req, forbidden(f"idPrefix {asked!r} is outside this credential's prefix")


def check_names(principal: Principal | None, ids: Iterable[str]) -> None:
    """For callers of the typed services on a principal's behalf (the resource API): every id
    must lie under its prefix, else ``Forbidden``."""
    if principal is None or principal.admin:
        return
    for id in ids:
        if not principal.may_name(id):
            raise Forbidden(f"{id!r} is outside this credential's prefix", field="id")
