"""Wire request types for ``promise.*`` (spec §2.3), decoded with msgspec.

Types check shape only: a missing field, a wrong type, a negative number or an absurd length is a
400 naming the field, decided before anything is read. The spec's own 400s (an unsettable state,
self-await, an undeliverable address) are checked first thing in each handler, because inside
``task.fence`` they become the inner status rather than the outer one. The hard limits that are
settings (``check_tags``, ``check_search_tags``) are checked there too, as outer 400s.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Struct, field

from resonate_project.core.conf import resonate_settings
from resonate_project.core.errors import InvalidRequest
from resonate_project.core.limits import ID_MAX_BYTES, ID_MAX_LENGTH, unstorable
from resonate_project.core.tags import BRANCH, DELAY, TARGET

Id = Annotated[str, Meta(min_length=1, max_length=ID_MAX_LENGTH)]
MS_MAX = 2**63 - 1  # deadlines are stored as signed 64-bit milliseconds
Ms = Annotated[int, Meta(ge=0, le=MS_MAX)]
Text = Annotated[str, Meta(max_length=ID_MAX_LENGTH)]
Address = Text
Limit = Annotated[int, Meta(ge=1)]
Tags = dict[str, str]
Head = dict[str, Any]


def check_bytes(name: str, value: str) -> None:
    if len(value) > ID_MAX_BYTES // 4 and len(value.encode()) > ID_MAX_BYTES:
        raise ValueError(f"`{name}` must be at most {ID_MAX_BYTES} bytes of UTF-8")


def utf8_len(value: str) -> int:
    return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))


def check_tags(field: str, tags: Tags) -> None:
    """The hard limits on a promise's tags, checked first thing by every handler that creates
    promises (``promise.create``, ``task.create``, ``task.fence``, ``schedule.create``): at most
    ``MAX_TAGS`` tags of at most ``MAX_TAG_BYTES`` of UTF-8 (keys and values together), a
    ``resonate:delay`` of at most ``MAX_DELAY_CHARS`` characters, and a ``resonate:target`` (an
    address, like a listener's) of at most 1024 bytes. They are settings, so they are checked at
    call time here rather than in ``__post_init__``, which also runs when the schedule step builds
    an occurrence: that must never fail."""
    conf = resonate_settings()
    if len(tags) > conf.MAX_TAGS:
        raise InvalidRequest(
            f"`{field}` has {len(tags)} tags; at most {conf.MAX_TAGS} are allowed (MAX_TAGS)",
            field=field,
        )
    delay = tags.get(DELAY)
    if delay is not None and len(delay) > conf.MAX_DELAY_CHARS:
        raise InvalidRequest(
            f"`{field}.{DELAY}` has {len(delay)} characters; at most {conf.MAX_DELAY_CHARS} are "
            "allowed (MAX_DELAY_CHARS)",
            field=f"{field}.{DELAY}",
        )
    target = tags.get(TARGET)
    if target is not None and utf8_len(target) > ID_MAX_BYTES:
        raise InvalidRequest(
            f"`{field}.{TARGET}` must be at most {ID_MAX_BYTES} bytes of UTF-8",
            field=f"{field}.{TARGET}",
        )
    size = sum(utf8_len(key) + utf8_len(value) for key, value in tags.items())
    if size > conf.MAX_TAG_BYTES:
        raise InvalidRequest(
            f"`{field}` holds {size} bytes of UTF-8 (keys and values); at most "
            f"{conf.MAX_TAG_BYTES} are allowed (MAX_TAG_BYTES)",
            field=field,
        )


def check_search_tags(field: str, tags: Tags | None) -> None:
    """A search filters by at most ``MAX_SEARCH_TAGS`` tags (each one is a condition in the
    query; SQLite refuses a thousand)."""
    limit = resonate_settings().MAX_SEARCH_TAGS
    if tags is not None and len(tags) > limit:
        raise InvalidRequest(
            f"`{field}` has {len(tags)} tags; a search takes at most {limit} (MAX_SEARCH_TAGS)",
            field=field,
        )


def later(now: int, ms: int) -> int:
    """``now + ms``, saturating at the largest storable instant (a debug clock may sit near it)."""
    return min(now + ms, MS_MAX)


def check_storable(name: str, value: str | None) -> None:
    if value is not None and (bad := unstorable(value)) is not None:
        raise ValueError(f"`{name}` may not contain {bad}")


def check_storable_dict(name: str, values: dict[str, str] | None) -> None:
    for key, value in (values or {}).items():
        if (bad := unstorable(key)) is not None:
            raise ValueError(f"`{name}` may not contain {bad} in a key")
        check_storable(f"{name}.{key}", value)


def check_items(name: str, items: list[Any]) -> None:
    """A request's list holds at most ``MAX_LIST_ITEMS`` (each item is a query parameter, and
    SQLite refuses more than its variable limit: 250,000 here, 32,766 by default)."""
    limit = resonate_settings().MAX_LIST_ITEMS
    if len(items) > limit:
        raise ValueError(
            f"`{name}` has {len(items)} items; at most {limit} are allowed (MAX_LIST_ITEMS)"
        )


class Req(Struct):
    """Base of every request type: caps the byte length of its top-level strings, refuses what
    no database can store (``core.limits.unstorable``) in its strings, tags and values, and
    caps its lists at ``MAX_LIST_ITEMS``. Raised here, the refusal is decided while decoding,
    before anything is read; a request built in Python (``checked``) gets the same checks."""

    def __post_init__(self) -> None:
        for name, wire in zip(self.__struct_fields__, self.__struct_encode_fields__, strict=True):
            value = getattr(self, name)
            if isinstance(value, str):
                check_bytes(wire, value)
                check_storable(wire, value)
            elif isinstance(value, dict):
                check_storable_dict(wire, value)
            elif isinstance(value, Value):
                check_storable_dict(f"{wire}.headers", value.headers)
                check_storable(f"{wire}.data", value.data)
            elif isinstance(value, list):
                check_items(wire, value)


class Value(Struct, forbid_unknown_fields=False):
    headers: dict[str, str] | None = None
    data: str | None = None


class PromiseGetReq(Req):
    id: Id


class PromiseCreateReq(Req, rename="camel"):
    id: Id
    timeout_at: Ms
    param: Value = field(default_factory=Value)
    tags: Tags = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        if BRANCH in self.tags:  # indexed for preload
            check_bytes(f"tags.{BRANCH}", self.tags[BRANCH])


class PromiseSettleReq(Req):
    id: Id
    state: str
    value: Value = field(default_factory=Value)


class PromiseRegisterCallbackReq(Req):
    awaited: Id
    awaiter: Id


class PromiseRegisterListenerReq(Req):
    awaited: Id
    address: Address


class PromiseSearchReq(Req):
    state: str | None = None
    tags: Tags | None = None
    limit: Limit | None = None
    cursor: Text | None = None
    # Only ids starting with this (an extension; a prefix-limited credential is narrowed to its
    # prefix this way, see resonate_project/access/rules.py).
    idPrefix: Text | None = None


# Nested action envelopes (task.create / task.fence / task.fulfill / task.suspend).


class CreateAction(Struct, tag_field="kind", tag="promise.create"):
    data: PromiseCreateReq
    head: Head = field(default_factory=dict)


class SettleAction(Struct, tag_field="kind", tag="promise.settle"):
    data: PromiseSettleReq
    head: Head = field(default_factory=dict)
