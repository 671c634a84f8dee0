"""What a principal may do with a decoded protocol request.

Every id a request names (``id``, ``awaited``, ``awaiter``, ``promiseId``, a nested action's ids,
every heartbeat task id) must lie under the principal's prefix, and so must the tag values the
server later reads *by* (``ID_TAGS``: a ``resonate:branch`` is what preload selects on, a
``resonate:parent``/``resonate:origin`` what the call tree follows, a ``resonate:schedule`` what a
schedule's occurrences are listed by). Every address it writes (a ``resonate:target``, a
listener's ``address``) must be one it may use: ``poll://`` only in its groups, ``http(s)://`` only
to its push hosts. Searches are narrowed to the prefix (the reference server refuses them for
prefix tokens; narrowing is more useful and reveals nothing outside the prefix). What reads return
is narrowed once more in ``engine.scope``, whatever value led to them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlsplit

import msgspec

from resonate_project.access.principal import Principal
from resonate_project.core.addresses import is_push, parse_poll
from resonate_project.core.errors import Forbidden
from resonate_project.core.protocol import Response
from resonate_project.core.tags import BRANCH, ORIGIN, PARENT, SCHEDULE, TARGET

ID_FIELDS = frozenset({"id", "awaited", "awaiter", "promiseId"})
# Tag values that name promises or schedules the server (or its admin) reads by.
ID_TAGS = (BRANCH, PARENT, ORIGIN, SCHEDULE)
TAG_FIELDS = frozenset({"tags", "promiseTags"})
ADDRESS_FIELDS = frozenset({"address"})
SEARCH_KINDS = frozenset({"promise.search", "task.search", "schedule.search"})


def _fields(value: msgspec.Struct) -> Iterator[tuple[str, Any]]:
    # The class attributes, not msgspec.structs.fields(), which re-reads the annotations on
    # every call (~250 µs a request).
    cls = type(value)
    for name, wire in zip(cls.__struct_fields__, cls.__struct_encode_fields__, strict=True):
        yield wire, getattr(value, name)


def named_ids(value: Any) -> Iterator[str]:
    """Every identifier a decoded request names, nested actions included."""
    if isinstance(value, msgspec.Struct):
        for wire, item in _fields(value):
            if wire in ID_FIELDS and isinstance(item, str):
                yield item
            else:
                yield from named_ids(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from named_ids(item)


def written_tags(value: Any) -> Iterator[dict[str, str]]:
    """Every tag set a decoded (non-search) request would store, nested actions included."""
    if isinstance(value, msgspec.Struct):
        for wire, item in _fields(value):
            if wire in TAG_FIELDS and isinstance(item, dict):
                yield item
            else:
                yield from written_tags(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from written_tags(item)


def written_addresses(value: Any) -> Iterator[str]:
    """Every listener ``address`` a decoded request would store (targets are tags)."""
    if isinstance(value, msgspec.Struct):
        for wire, item in _fields(value):
            if wire in ADDRESS_FIELDS and isinstance(item, str):
                yield item
            elif wire not in TAG_FIELDS:
                yield from written_addresses(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from written_addresses(item)


def forbidden(message: str) -> Response:
    return Response(403, message)


def authorize(kind: str, req: Any, principal: Principal | None) -> tuple[Any, Response | None]:
    """The request to run (a search narrowed to the prefix) or the 403 that refuses it."""
    if principal is None or principal.admin:
        return req, None
    if kind in SEARCH_KINDS:
        return narrow(req, principal)
    try:
        check_names(principal, named_ids(req))
        if kind not in READ_KINDS:
            check_writes(principal, written_tags(req), written_addresses(req))
    except Forbidden as exc:
        return req, forbidden(exc.message)
    return req, None


# Kinds that store nothing a principal chose (their tags and addresses need no check).
READ_KINDS = frozenset({"promise.get", "task.get", "schedule.get"})


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


def check_tags(principal: Principal | None, tag_sets: Iterable[dict[str, str]]) -> None:
    """The tag values the server reads by (``ID_TAGS``) must lie under the prefix."""
    if principal is None or principal.admin or not principal.prefix:
        return
    for tags in tag_sets:
        for key in ID_TAGS:
            value = tags.get(key)
            if value is not None and not principal.may_name(value):
                raise Forbidden(
                    f"tag {key} {value!r} is outside this credential's prefix", field=f"tags.{key}"
                )


def check_addresses(principal: Principal | None, addresses: Iterable[str]) -> None:
    """Every address must be one the principal may send to: a ``poll://`` address in one of its
    groups, an ``http(s)://`` one to one of its push hosts; a group-limited principal may not
    hand work to the Django Tasks worker (``django-tasks://``), which serves the whole site."""
    if principal is None or principal.admin:
        return
    for address in addresses:
        refusal = address_refusal(principal, address)
        if refusal is not None:
            raise Forbidden(refusal, field="address")


def address_refusal(principal: Principal, address: str) -> str | None:
    if principal.admin or not address:
        return None
    poll = parse_poll(address)
    if poll is not None:
        if principal.may_stream(poll.group):
            return None
        return f"address {address} is in group {poll.group!r}, which this credential may not use"
    if is_push(address):
        try:
            host = urlsplit(address).hostname or ""
        except ValueError:
            return None  # malformed: the handler's own check answers 400
        if principal.may_push_to(host):
            return None
        return f"address {address}: this credential may not push to {host!r}"
    if address.startswith("django-tasks://") and principal.groups is not None:
        return f"address {address}: a group-limited credential may not target Django tasks"
    return None


def check_writes(
    principal: Principal | None, tag_sets: Iterable[dict[str, str]], addresses: Iterable[str]
) -> None:
    """What a request stores on a principal's behalf: its id tags, its targets and addresses."""
    if principal is None or principal.admin:
        return
    tag_list = list(tag_sets)
    check_tags(principal, tag_list)
    targets = [t[TARGET] for t in tag_list if isinstance(t.get(TARGET), str)]
    check_addresses(principal, [*targets, *addresses])
