"""Promise handlers P-01 … P-06, one per request kind (spec §4), each ``(request, now)``.

Writers run in one transaction: lock, decide every refusal, write, run the enabled steps inline
(``effects.finish``), return. Readers take no lock and write nothing (read discipline -p, L1).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.models import Q, QuerySet, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from promises.models import Callback, Listener, Promise
from resonate_project.core import addresses
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import (
    PENDING,
    SETTABLE,
    Response,
    bad_request,
    fail,
    is_live,
    ok,
    promise_record,
)
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
from resonate_project.engine import promises as services
from resonate_project.engine.effects import Effects
from resonate_project.engine.locks import promise_for_update, promises_for_update
from resonate_project.engine.search import search_page
from resonate_project.engine.uow import unit_of_work

if TYPE_CHECKING:
    from tasks_app.models import Task

PROMISE_NOT_FOUND = "promise not found"


def promise_get(req: PromiseGetReq, now: int) -> Response:
    """P-01."""
    p = Promise.objects.filter(id=req.id).first()
    if p is None:
        return fail(404, PROMISE_NOT_FOUND)
    return ok({"promise": promise_record(p, now)})


def promise_create(req: PromiseCreateReq, now: int) -> Response:
    """P-02. Idempotent by id: an existing promise is returned as projected now, whatever the
    request says. A ``resonate:target`` tag also creates the task, due for dispatch at once (or
    at ``resonate:delay``)."""
    if refusal := check_tags("tags", req.tags):
        return refusal
    with unit_of_work(now) as fx:
        res = create(req, now, fx)
        return res


def create(req: PromiseCreateReq, now: int, fx: Effects, locked: Promise | None = None) -> Response:
    """P-02 inside a caller's transaction (also the inner handler of ``task.fence``).

    The spec refuses a timer that is also targeted (400); the Python SDK's ``ctx.sleep`` sends
    exactly that, so it is accepted with timer semantics (README, deviations).
    """
    if refusal := check_target("tags", req.tags):
        return refusal
    if locked is not None:  # the caller (task.fence) holds it already
        return ok({"promise": promise_record(locked, now)})
    created = services.create_with_task(req, now, fx)
    if created is not None:
        return ok({"promise": promise_record(created, now)})
    existing = promise_for_update(req.id)
    if existing is None:  # cannot happen: promises are never deleted (but debug.reset)
        return fail(409, "promise was deleted concurrently")
    return ok({"promise": promise_record(existing, now)})


def check_settable(state: str) -> Response | None:
    if state not in SETTABLE:
        return bad_request(f"state must be one of {', '.join(SETTABLE)}, got {state!r}")
    return None


def promise_settle(req: PromiseSettleReq, now: int) -> Response:
    """P-03. The first verdict wins; a later settle, or one after the deadline, answers 200 with
    the record as it stands (clients must read the record, not the status)."""
    if refusal := check_settable(req.state):
        return refusal
    with unit_of_work(now) as fx:
        res = settle(req.id, req.state, req.value, now, fx)
        return res


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
        settled = services.settle_if_live(promise_id, state, value, now, fx)
        if settled is not None:
            return ok({"promise": promise_record(settled, now)})
        # Absent, settled or dead: nothing to write, so a plain read answers (read discipline -p).
        existing = Promise.objects.filter(id=promise_id).first()
        if existing is None:
            return fail(404, PROMISE_NOT_FOUND)
        return ok({"promise": promise_record(existing, now)})
    if is_live(locked, now):
        services.settle(locked, state, value, now, fx, task=task)
    return ok({"promise": promise_record(locked, now)})


def promise_register_callback(req: PromiseRegisterCallbackReq, now: int) -> Response:
    """P-04. Records that ``awaiter``'s task is resumed when ``awaited`` settles, only while both
    are live; answers with the awaited record either way."""
    if req.awaited == req.awaiter:
        return bad_request("awaited and awaiter must differ")
    with unit_of_work(now):
        locked = promises_for_update([req.awaited, req.awaiter])
        awaited, awaiter = locked.get(req.awaited), locked.get(req.awaiter)
        if awaited is None:
            return fail(404, PROMISE_NOT_FOUND)
        if awaiter is None:
            return fail(422, "awaiter promise not found")
        if awaiter.target is None:
            return fail(422, "awaiter has no resonate:target, so no task to resume")
        if not awaited.external:
            return fail(422, "awaited promise is internal (not external, targeted or a timer)")
        if is_live(awaited, now) and is_live(awaiter, now):
            Callback.objects.bulk_create(
                [Callback(awaited=awaited, awaiter=awaiter)], ignore_conflicts=True
            )
        return ok({"promise": promise_record(awaited, now)})


def check_address(address: str) -> Response | None:
    """Spec HEAD: a ``poll://`` address delivery can route, or an ``http(s)://`` URL the push
    policy lets through as written (``PUSH_ALLOWED``; no DNS here, the drain checks the resolved
    IPs again)."""
    allowed = addresses.parse_allowed(resonate_settings().PUSH_ALLOWED)
    reason = addresses.address_refusal(address, allowed)
    return None if reason is None else bad_request(reason)


def check_target(field: str, tags: dict[str, str]) -> Response | None:
    """A push ``resonate:target`` must be a destination the push policy lets through; other
    targets are stored as the spec says (one nobody can deliver to waits in the outbox)."""
    target = tags.get(TARGET)
    if target is None or not addresses.is_push(target):
        return None
    allowed = addresses.parse_allowed(resonate_settings().PUSH_ALLOWED)
    reason = addresses.push_refusal(target, allowed)
    if reason is None:
        return None
    return bad_request(f"`{field}.{TARGET}` address {target} {reason}")


def promise_register_listener(req: PromiseRegisterListenerReq, now: int) -> Response:
    """P-05. A listener on a settled promise is not recorded: the 200 record is the answer.

    A live promise holds at most ``MAX_LISTENERS_PER_PROMISE`` distinct addresses: one more is
    a 409, a refusal in the promise's current state like the others (the request is well formed
    and would succeed on another promise); registering an address again stays an idempotent 200.
    """
    if refusal := check_address(req.address):
        return refusal
    with unit_of_work(now):
        p = promise_for_update(req.awaited)
        if p is None:
            return fail(404, PROMISE_NOT_FOUND)
        if not p.external:
            return fail(422, "promise is internal (not external, targeted or a timer)")
        if is_live(p, now):
            if refusal := listener_limit_refusal(p, req.address):
                return refusal
            Listener.objects.bulk_create(
                [Listener(awaited=p, address=req.address)], ignore_conflicts=True
            )
        return ok({"promise": promise_record(p, now)})


def listener_limit_refusal(p: Promise, address: str) -> Response | None:
    """Under ``p``'s row lock, so concurrent registrations count one after another."""
    cap = resonate_settings().MAX_LISTENERS_PER_PROMISE
    listeners = Listener.objects.filter(awaited=p)
    if listeners[:cap].count() < cap or listeners.filter(address=address).exists():
        return None
    return fail(
        409,
        f"promise has {cap} listeners, the most allowed (MAX_LISTENERS_PER_PROMISE); "
        "address is not one of them",
    )


PROMISE_STATES = ("pending", "resolved", "rejected", "rejected_canceled", "rejected_timedout")


def projected_state_q(state: str, now: int) -> Q:
    """Rows whose *projected* state is ``state`` at ``now`` (C8 holds for searches too)."""
    dead = Q(state=PENDING, timeout_at__lte=now)
    if state == "pending":
        return Q(state=PENDING, timeout_at__gt=now)
    if state == "resolved":
        return Q(state="resolved") | (dead & Q(timer=True))
    if state == "rejected_timedout":
        return Q(state="rejected_timedout") | (dead & Q(timer=False))
    return Q(state=state)


def filter_tags(qs: QuerySet[Any], field: str, tags: dict[str, str]) -> QuerySet[Any]:
    """Exact match on every given tag. PostgreSQL: jsonb containment (``@>``). SQLite: each key
    through an explicit text transform (keys are arbitrary strings, even ones with ``__``)."""
    if connection.vendor == "postgresql":
        return qs.filter(**{f"{field}__contains": tags})
    for i, (key, value) in enumerate(sorted(tags.items())):
        text = Cast(KeyTextTransform(key, field), output_field=TextField())
        qs = qs.alias(**{f"_tag{i}": text}).filter(**{f"_tag{i}": value})
    return qs


def promise_search(req: PromiseSearchReq, now: int) -> Response:
    """Not in the spec (501 there); shaped like the reference server: filter by projected state
    and exact tag values, ordered by id, ``cursor`` = the last id of the previous page."""
    if req.state is not None and req.state not in PROMISE_STATES:
        return bad_request(f"state must be one of {', '.join(PROMISE_STATES)}")
    if refusal := check_search_tags("tags", req.tags):
        return refusal
    conf = resonate_settings()
    limit = req.limit or conf.SEARCH_LIMIT_DEFAULT
    if limit > conf.SEARCH_LIMIT_MAX:
        return bad_request(f"limit must be at most {conf.SEARCH_LIMIT_MAX}")
    qs = Promise.objects.all()
    if req.state is not None:
        qs = qs.filter(projected_state_q(req.state, now))
    if req.tags:
        qs = filter_tags(qs, "tags", req.tags)
    if req.idPrefix:
        qs = qs.filter(pk__startswith=req.idPrefix)
    records, cursor = search_page(qs, req.cursor, limit, lambda p: promise_record(p, now))
    data: dict[str, object] = {"promises": records}
    if cursor is not None:
        data["cursor"] = cursor
    return ok(data)


__all__ = [
    "promise_create",
    "promise_get",
    "promise_register_callback",
    "promise_register_listener",
    "promise_search",
    "promise_settle",
]
