"""The Python API for promises: one typed function per protocol kind, keyword-only, with ``now``
(integer milliseconds) passed in.

Each validates its arguments as the envelope validates a request body, runs the protocol
handler in one unit of work, and returns the record the wire would carry; a refusal raises a
``core.errors.ProtocolError`` (``status``, ``message``, ``field``) and changes nothing. Called
inside a host's ``transaction.atomic()``, the write, its outbox rows and its wake-ups commit or
roll back with the host's own rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from promises import handlers
from resonate_project.core.protocol import Page, PromiseRecord
from resonate_project.core.wire import checked
from resonate_project.core.wire.promises import (
    PromiseCreateReq,
    PromiseGetReq,
    PromiseRegisterCallbackReq,
    PromiseRegisterListenerReq,
    PromiseSearchReq,
    PromiseSettleReq,
    Value,
)

type ValueArg = Value | Mapping[str, Any] | None


def value_fields(value: ValueArg) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Value):
        return {"headers": value.headers, "data": value.data}
    return dict(value)


def promise_get(*, id: str, now: int) -> PromiseRecord:
    """P-01: the promise as projected at ``now`` (``NotFound`` if absent)."""
    res = handlers.promise_get(checked(PromiseGetReq, id=id), now)
    return cast(PromiseRecord, res.data["promise"])


def promise_create(
    *,
    id: str,
    timeout_at: int,
    now: int,
    param: ValueArg = None,
    tags: Mapping[str, str] | None = None,
) -> PromiseRecord:
    """P-02, idempotent by id: an existing promise is returned as it stands. A
    ``resonate:target`` tag also creates its task and sends ``execute`` once committed."""
    req = checked(
        PromiseCreateReq,
        id=id,
        timeoutAt=timeout_at,
        param=value_fields(param),
        tags=dict(tags or {}),
    )
    return cast(PromiseRecord, handlers.promise_create(req, now).data["promise"])


def promise_settle(*, id: str, state: str, now: int, value: ValueArg = None) -> PromiseRecord:
    """P-03: ``state`` is resolved, rejected or rejected_canceled; the first verdict wins, and a
    later one returns the record as it stands."""
    req = checked(PromiseSettleReq, id=id, state=state, value=value_fields(value))
    return cast(PromiseRecord, handlers.promise_settle(req, now).data["promise"])


def promise_register_callback(*, awaited: str, awaiter: str, now: int) -> PromiseRecord:
    """P-04: resume ``awaiter``'s task when ``awaited`` settles; returns the awaited record."""
    req = checked(PromiseRegisterCallbackReq, awaited=awaited, awaiter=awaiter)
    return cast(PromiseRecord, handlers.promise_register_callback(req, now).data["promise"])


def promise_register_listener(*, awaited: str, address: str, now: int) -> PromiseRecord:
    """P-05: send ``unblock`` to ``address`` (``poll://…`` or an allowed ``http(s)://`` URL) when
    ``awaited`` settles; returns the awaited record."""
    req = checked(PromiseRegisterListenerReq, awaited=awaited, address=address)
    return cast(PromiseRecord, handlers.promise_register_listener(req, now).data["promise"])


def promise_search(
    *,
    now: int,
    state: str | None = None,
    tags: Mapping[str, str] | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    id_prefix: str | None = None,
) -> Page[PromiseRecord]:
    """Promises by projected state and exact tags, in id order, one page at a time."""
    req = checked(
        PromiseSearchReq,
        state=state,
        tags=None if tags is None else dict(tags),
        limit=limit,
        cursor=cursor,
        idPrefix=id_prefix,
    )
    data = handlers.promise_search(req, now).data
    return Page(data["promises"], data.get("cursor"))
