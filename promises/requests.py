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

Id = Annotated[str, Meta(min_length=1, max_length=ID_MAX_LENGTH)]
Ms = Annotated[int, Meta(ge=0, le=2**63 - 1)]
Text = Annotated[str, Meta(max_length=ID_MAX_LENGTH)]
Address = Annotated[str, Meta(max_length=4096)]
Limit = Annotated[int, Meta(ge=1)]
Tags = dict[str, str]
Head = dict[str, Any]


class Value(Struct, forbid_unknown_fields=False):
    headers: dict[str, str] | None = None
    data: str | None = None


class PromiseGetReq(Struct):
    id: Id


class PromiseCreateReq(Struct, rename="camel"):
    id: Id
    timeout_at: Ms
    param: Value = field(default_factory=Value)
    tags: Tags = field(default_factory=dict)


class PromiseSettleReq(Struct):
    id: Id
    state: str
    value: Value = field(default_factory=Value)


class PromiseRegisterCallbackReq(Struct):
    awaited: Id
    awaiter: Id


class PromiseRegisterListenerReq(Struct):
    awaited: Id
    address: Address


class PromiseSearchReq(Struct):
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
