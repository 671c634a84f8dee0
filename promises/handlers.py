"""Promise handlers P-01 … P-06, one per request kind (spec §4), each ``(request, now)``.

Writers run in one unit of work (``engine.uow``): lock, decide every refusal, write, and the
enabled steps run inline. Readers take no lock and write nothing (read discipline -p, L1). A
refusal is raised (``core.errors``) before the first write.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from promises.models import Callback, Listener, Promise
from promises.selectors import PROMISE_STATES, promises
from resonate_project.core import addresses
from resonate_project.core.conf import resonate_settings
from resonate_project.core.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    ProtocolError,
    Unprocessable,
)
from resonate_project.core.protocol import SETTABLE, Response, is_live, ok, promise_record
from resonate_project.core.tags import TARGET
from resonate_project.core.wire.promises import (
    PromiseCreateReq,
    PromiseGetReq,
    PromiseRegisterCallbackReq,
    PromiseRegisterListenerReq,
    PromiseSearchReq,
    PromiseSettleReq,
    Value,
    check_search_tags,
    check_tags,
)
from resonate_project.engine import promise_transitions
from resonate_project.engine.effects import Effects
from resonate_project.engine.locks import promise_for_update, promises_for_update
from resonate_project.engine.search import check_state, search
from resonate_project.engine.uow import unit_of_work

if TYPE_CHECKING:
    from tasks_app.models import Task

PROMISE_NOT_FOUND = "promise not found"


def promise_get(req: PromiseGetReq, now: int) -> Response:
    """P-01."""
    p = Promise.objects.filter(id=req.id).first()
    if p is None:
        raise NotFound(PROMISE_NOT_FOUND)
    return ok({"promise": promise_record(p, now)})


def promise_create(req: PromiseCreateReq, now: int) -> Response:
    """P-02. Idempotent by id: an existing promise is returned as projected now, whatever the
    request says. A ``resonate:target`` tag also creates the task, due for dispatch at once (or
    at ``resonate:delay``)."""
    check_tags("tags", req.tags)
    with unit_of_work(now) as fx:
        return create(req, now, fx)


def promise_create_all(items: list[tuple[PromiseCreateReq, int]]) -> list[Response | None]:
    """P-02 for requests answered together (``edges.api.together``), each ``(request, now)``,
    their ids distinct: the plain promises among them born in one statement. Each answer, or None
    where ``promise_create`` answers the request instead: a refusal, a promise with a target or
    external, an id that exists."""
    plain = []
    for i, (req, _) in enumerate(items):
        try:
            check_tags("tags", req.tags)
        except ProtocolError:
            continue
        if promise_transitions.is_plain(req.tags):
            plain.append(i)
    out: list[Response | None] = [None] * len(items)
    if not plain:
        return out
    with unit_of_work(items[plain[0]][1]):
        born = promise_transitions.create_plain_all([items[i] for i in plain])
    for i, p in zip(plain, born, strict=True):
        if p is not None:
            out[i] = ok({"promise": promise_record(p, items[i][1])})
    return out


def create(req: PromiseCreateReq, now: int, fx: Effects, locked: Promise | None = None) -> Response:
    """P-02 inside a caller's transaction (also the inner handler of ``task.fence``).

    The spec refuses a timer that is also targeted (400); the Python SDK's ``ctx.sleep`` sends
    exactly that, so it is accepted with timer semantics (docs/reference/deviations.md).
    """
    check_target("tags", req.tags)
    if locked is not None:  # the caller (task.fence) holds it already
        return ok({"promise": promise_record(locked, now)})
    created = promise_transitions.create_with_task(req, now, fx)
    if created is not None:
        return ok({"promise": promise_record(created, now)})
    existing = promise_for_update(req.id)
    if existing is None:  # cannot happen: promises are never deleted (but debug.reset)
        raise Conflict("promise was deleted concurrently")
    return ok({"promise": promise_record(existing, now)})


def check_settable(state: str) -> None:
    if state not in SETTABLE:
        raise InvalidRequest(
            f"state must be one of {', '.join(SETTABLE)}, got {state!r}", field="state"
        )


def promise_settle(req: PromiseSettleReq, now: int) -> Response:
    """P-03. The first verdict wins; a later settle, or one after the deadline, answers 200 with
    the record as it stands (clients must read the record, not the status)."""
    check_settable(req.state)
    with unit_of_work(now) as fx:
        return settle(req.id, req.state, req.value, now, fx)


def promise_settle_all(items: list[tuple[PromiseSettleReq, int]]) -> list[Response | None]:
    """P-03 for requests answered together (``edges.api.together``), each ``(request, now)``,
    their ids distinct: the live plain promises among them settled in one statement. Each
    answer, or None where ``promise_settle`` answers the request instead: a refusal, a promise
    absent, settled, timed out, with a target or external."""
    wanted = [i for i, (req, _) in enumerate(items) if req.state in SETTABLE]
    out: list[Response | None] = [None] * len(items)
    if not wanted:
        return out
    with unit_of_work(items[wanted[0]][1]) as fx:
        settled = promise_transitions.settle_plain_all(
            [(req.id, req.state, req.value, now) for req, now in (items[i] for i in wanted)]
        )
        for p in settled.values():
            fx.settled_promise(p)
    for i in wanted:
        req, now = items[i]
        if req.id in settled:
            out[i] = ok({"promise": promise_record(settled[req.id], now)})
    return out


def settle(
    promise_id: str,
    state: str,
    value: Value,
    now: int,
    fx: Effects,
    locked: Promise | None = None,
    task: Task | None = None,
) -> Response:
    """P-03 after its 400, inside a caller's transaction (also the inner handler of a fence,
    which passes the promise and task it already locked and read)."""
    if locked is None:
        settled = promise_transitions.settle_if_live(promise_id, state, value, now, fx)
        if settled is not None:
            return ok({"promise": promise_record(settled, now)})
        # Absent, settled or dead: nothing to write, so a plain read answers (read discipline -p).
        existing = Promise.objects.filter(id=promise_id).first()
        if existing is None:
            raise NotFound(PROMISE_NOT_FOUND)
        if not is_live(existing, now):
            return ok({"promise": promise_record(existing, now)})
        # Live after all: its creator committed between the UPDATE's snapshot and this read's
        # (PostgreSQL's READ COMMITTED: the UPDATE passed over a row not yet committed, without
        # waiting), or it was born at a later clock reading than this request's (the UPDATE
        # leaves those). Answering this pending record would say the settle happened and
        # changed nothing; lock the row and settle it instead.
        locked = promise_for_update(promise_id)
        if locked is None:  # cannot happen: promises are never deleted (but debug.reset)
            raise NotFound(PROMISE_NOT_FOUND)
    if is_live(locked, now):
        promise_transitions.settle(locked, state, value, now, fx, task=task)
    return ok({"promise": promise_record(locked, now)})


def promise_register_callback(req: PromiseRegisterCallbackReq, now: int) -> Response:
    """P-04. Records that ``awaiter``'s task is resumed when ``awaited`` settles, only while both
    are live; answers with the awaited record either way."""
    if req.awaited == req.awaiter:
        raise InvalidRequest("awaited and awaiter must differ", field="awaiter")
    with unit_of_work(now):
        locked = promises_for_update([req.awaited, req.awaiter])
        awaited, awaiter = locked.get(req.awaited), locked.get(req.awaiter)
        if awaited is None:
            raise NotFound(PROMISE_NOT_FOUND)
        if awaiter is None:
            raise Unprocessable("awaiter promise not found", field="awaiter")
        if awaiter.target is None:
            raise Unprocessable(
                "awaiter has no resonate:target, so no task to resume", field="awaiter"
            )
        if not awaited.external:
            raise Unprocessable(
                "awaited promise is internal (not external, targeted or a timer)", field="awaited"
            )
        if is_live(awaited, now) and is_live(awaiter, now):
            Callback.objects.bulk_create(
                [Callback(awaited=awaited, awaiter=awaiter)], ignore_conflicts=True
            )
        return ok({"promise": promise_record(awaited, now)})


def check_address(address: str) -> None:
    """Spec HEAD: a ``poll://`` address delivery can route, or an ``http(s)://`` URL the push
    policy lets through as written (``PUSH_ALLOWED``; no DNS here, the drain checks the resolved
    IPs again)."""
    allowed = addresses.parse_allowed(resonate_settings().PUSH_ALLOWED)
    reason = addresses.address_refusal(address, allowed)
    if reason is not None:
        raise InvalidRequest(reason, field="address")


def check_target(field: str, tags: dict[str, str]) -> None:
    """A push ``resonate:target`` must be a destination the push policy lets through; other
    targets are stored as the spec says (one nobody can deliver to waits in the outbox)."""
    target = tags.get(TARGET)
    if target is None or not addresses.is_push(target):
        return
    allowed = addresses.parse_allowed(resonate_settings().PUSH_ALLOWED)
    reason = addresses.push_refusal(target, allowed)
    if reason is not None:
        raise InvalidRequest(
            f"`{field}.{TARGET}` address {target} {reason}", field=f"{field}.{TARGET}"
        )


def promise_register_listener(req: PromiseRegisterListenerReq, now: int) -> Response:
    """P-05. A listener on a settled promise is not recorded: the 200 record is the answer.

    A live promise holds at most ``MAX_LISTENERS_PER_PROMISE`` distinct addresses: one more is
    a 409, a refusal in the promise's current state like the others (the request is well formed
    and would succeed on another promise); registering an address again stays an idempotent 200.
    """
    check_address(req.address)
    with unit_of_work(now):
        p = promise_for_update(req.awaited)
        if p is None:
            raise NotFound(PROMISE_NOT_FOUND)
        if not p.external:
            raise Unprocessable(
                "promise is internal (not external, targeted or a timer)", field="awaited"
            )
        if is_live(p, now):
            check_listener_limit(p, req.address)
            Listener.objects.bulk_create(
                [Listener(awaited=p, address=req.address)], ignore_conflicts=True
            )
        return ok({"promise": promise_record(p, now)})


def check_listener_limit(p: Promise, address: str) -> None:
    """Under ``p``'s row lock, so concurrent registrations count one after another."""
    cap = resonate_settings().MAX_LISTENERS_PER_PROMISE
    listeners = Listener.objects.filter(awaited=p)
    if listeners[:cap].count() < cap or listeners.filter(address=address).exists():
        return
    raise Conflict(
        f"promise has {cap} listeners, the most allowed (MAX_LISTENERS_PER_PROMISE); "
        "address is not one of them",
        field="address",
    )


def promise_search(req: PromiseSearchReq, now: int) -> Response:
    """Not in the spec (501 there); shaped like the reference server: filter by projected state
    and exact tag values, ordered by id, ``cursor`` = the last id of the previous page."""
    check_state(req.state, PROMISE_STATES)
    check_search_tags("tags", req.tags)
    return ok(
        search(
            promises(req.state, req.tags, now=now),
            key="promises",
            record=lambda p: promise_record(p, now),
            limit=req.limit,
            cursor=req.cursor,
            id_prefix=req.idPrefix,
        )
    )
