"""Wire request types for ``promise.*`` (spec §2.3), decoded with msgspec.

Types check shape only: a missing field, a wrong type, a negative number or an absurd length is a
400 naming the field, decided before anything is read. The spec's own 400s (an unsettable state,
self-await, an undeliverable address) are checked first thing in each handler, because inside
``task.fence`` they become the inner status rather than the outer one.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Struct, field

from .models import ID_MAX_LENGTH
from .tags import BRANCH

# Identifiers are indexed, and a PostgreSQL btree entry holds at most 2704 bytes (an index may
# pair two identifiers), so every identifier-like string is capped at 1024 bytes of UTF-8.
ID_MAX_BYTES = 1024
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


def later(now: int, ms: int) -> int:
    """``now + ms``, saturating at the largest storable instant (a debug clock may sit near it)."""
    return min(now + ms, MS_MAX)


class Req(Struct):
    """Base of every request type: caps the byte length of its top-level strings."""

    def __post_init__(self) -> None:
        for name, wire in zip(self.__struct_fields__, self.__struct_encode_fields__, strict=True):
            value = getattr(self, name)
            if isinstance(value, str):
                check_bytes(wire, value)


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


# Nested action envelopes (task.create / task.fence / task.fulfill / task.suspend).


class CreateAction(Struct, tag_field="kind", tag="promise.create"):
    data: PromiseCreateReq
    head: Head = field(default_factory=dict)


class SettleAction(Struct, tag_field="kind", tag="promise.settle"):
    data: PromiseSettleReq
    head: Head = field(default_factory=dict)
