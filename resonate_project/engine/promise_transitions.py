"""Promise births and settlements shared by handlers and steps (spec §4 P-02/P-03, §1.7, R1,
R3, R4). Callers hold the relevant promise row locks and own the transaction."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models import Model

from promises.models import Callback, Listener, Promise, PromiseState
from resonate_project.core.calls import function_name
from resonate_project.core.protocol import is_live, promise_record, timeout_verdict
from resonate_project.core.tags import BRANCH, PARENT, TARGET, is_external, is_targeted, is_timer
from resonate_project.core.wire.promises import PromiseCreateReq, Value
from resonate_project.engine import outbox, rows, wake
from resonate_project.engine.effects import Effects
from resonate_project.engine.task_transitions import born_fulfilled, born_pending, fulfil, resume
from tasks_app.models import Task


def new_promise(req: PromiseCreateReq, now: int) -> Promise:
    """An unsaved promise born at ``now``: pending if its deadline is ahead, else settled at the
    deadline (resolved for a timer, rejected_timedout otherwise) and stamped ``createdAt =
    settledAt = timeoutAt``."""
    tags = req.tags
    timer = is_timer(tags)
    if req.timeout_at > now:
        state: str = PromiseState.PENDING
        created_at, settled_at = now, None
    else:
        state = timeout_verdict(timer)
        created_at = settled_at = req.timeout_at
    return Promise(
        id=req.id,
        state=state,
        param_headers=req.param.headers,
        param_data=req.param.data,
        tags=tags,
        timeout_at=req.timeout_at,
        created_at=created_at,
        settled_at=settled_at,
        target=tags.get(TARGET),
        timer=timer,
        external=is_external(tags),
        branch=tags.get(BRANCH),
        parent=tags.get(PARENT),
        function=function_name(req.param.data) if TARGET in tags else None,
    )


def insert(obj: Model) -> bool:
    """Insert ``obj`` unless its primary key exists; False if it does (one round trip)."""
    return rows.insert(obj, skip_existing=True)


def create_with_task(req: PromiseCreateReq, now: int, fx: Effects) -> Promise | None:
    """P-02 births: the promise and, when targeted, its task (pending v0, or fulfilled v0 when
    born dead). None if the id was taken concurrently."""
    p = new_promise(req, now)
    if not insert(p):
        return None
    if p.external and p.state == PromiseState.PENDING:  # R1 arms its deadline (C1)
        wake.deadline(p.timeout_at, now)
    if p.target is not None:
        if p.state == PromiseState.PENDING:
            born_pending(p, now, fx)
        else:
            born_fulfilled(p)
    return p


def settle(
    p: Promise,
    state: str,
    value: Value | None,
    settled_at: int,
    fx: Effects,
    task: Task | None = None,
) -> None:
    """Store a settlement and fulfil the promise's task in the same transaction (§1.7).
    ``task``: the promise's task when the caller already read it under the lock."""
    rows.update(p, apply_settlement(p, state, value, settled_at))
    if p.target is not None:
        if task is None:
            task = Task.objects.filter(pk=p.id).first()
        if task is not None and task.state != "fulfilled":
            fulfil(task)
            fx.completed_task(task)
    fx.settled_promise(p)


SETTLEMENT_FIELDS = ["state", "value_headers", "value_data", "settled_at"]


def apply_settlement(p: Promise, state: str, value: Value | None, settled_at: int) -> list[str]:
    """Set ``p``'s settlement fields (in memory); returns their names, for the row update."""
    p.state = state
    p.value_headers = value.headers if value is not None else None
    p.value_data = value.data if value is not None else None
    # Never before its birth: each request reads the clock as it arrives, so a settle that
    # arrived first may run after the create it raced (the stores agree it came second).
    p.settled_at = max(settled_at, p.created_at)
    return SETTLEMENT_FIELDS


def settle_if_live(
    promise_id: str, state: str, value: Value, now: int, fx: Effects
) -> Promise | None:
    """P-03's write in one statement: settle the promise only if it is live at ``now``
    (``UPDATE … WHERE state = 'pending' AND timeout_at > now RETURNING *``, which takes the row
    lock), then fulfil its task. None if nothing matched (absent, settled, or dead)."""
    p = _settle_row(promise_id, state, value, now)
    if p is None:
        return None
    if p.target is not None:
        task = Task.objects.filter(pk=p.id).first()
        if task is not None and task.state != "fulfilled":
            fulfil(task)
            fx.completed_task(task)
    fx.settled_promise(p)
    return p


def is_plain(tags: dict[str, str]) -> bool:
    """A promise with no target that is not external: no task, no callbacks or listeners (C2,
    C3) and no durable deadline (C1), so its birth and its settlement each write one row and
    enable no step."""
    return not is_targeted(tags) and not is_external(tags)


def create_plain_all(items: Sequence[tuple[PromiseCreateReq, int]]) -> list[Promise | None]:
    """P-02 for plain promises (``is_plain``) of distinct ids, each ``(request, now)``, in one
    statement (a multi-row ``INSERT … ON CONFLICT DO NOTHING``): a plain birth writes its row and
    nothing else. Each promise created, or None where its id exists (``create_with_task``'s
    caller reads that one under its lock)."""
    born = [new_promise(req, now) for req, now in items]
    written = rows.insert_all(born)
    return [p if p.id in written else None for p in born]


def settle_plain_all(items: Sequence[tuple[str, str, Value, int]]) -> dict[str, Promise]:
    """P-03's write for plain promises of distinct ids, each ``(id, state, value, now)``, in one
    statement (``UPDATE … FROM`` a ``VALUES`` list): each promise live at its ``now``, with no
    target and not external, is settled, which is its whole transition (no task, no callbacks or
    listeners). The promises settled, by id; any other is untouched (``settle_if_live`` decides
    it)."""
    changes = [
        (id, [state, value.headers, value.data, now], now) for id, state, value, now in items
    ]
    settled = rows.update_each_returning(
        Promise,
        SETTLEMENT_FIELDS,
        changes,
        f"{_settleable('v._now')} AND target IS NULL AND NOT external",
    )
    return {p.id: p for p in settled}


def _settleable(now: str) -> str:
    """The rows a one-statement settlement writes: pending and live at ``now`` (SQL: a
    parameter or a column), and born no later (a promise born at a later clock reading than the
    request's is left to the caller's locked path, where ``apply_settlement`` stamps it no
    earlier than its birth)."""
    return f"state = 'pending' AND timeout_at > {now} AND created_at <= {now}"


def _settle_row(promise_id: str, state: str, value: Value, now: int) -> Promise | None:
    found = rows.update_returning(*_settle_where(promise_id, state, value, now))
    return found[0] if found else None


def _settle_where(
    promise_id: str, state: str, value: Value, now: int
) -> tuple[type[Promise], dict[str, Any], str, list[Any]]:
    return (
        Promise,
        {
            "state": state,
            "value_headers": value.headers,
            "value_data": value.data,
            "settled_at": now,
        },
        f"id = %s AND {_settleable('%s')}",
        [promise_id, now, now],
    )


def time_out(p: Promise, fx: Effects) -> None:
    """R1: materialise the deadline settlement (value untouched, stamped at the deadline)."""
    settle(p, timeout_verdict(p.timer), None, p.timeout_at, fx)


def live_or_time_out(p: Promise, now: int, fx: Effects) -> bool:
    """True if ``p`` is live at ``now``; else its timeout is applied now (C5: nothing is
    re-pended or dispatched for the dead), which fulfils its task, and False."""
    if is_live(p, now):
        return True
    time_out(p, fx)
    return False


def unblock_listeners(
    listeners: list[tuple[int, str, str]], records: dict[str, Any], now: int
) -> int:
    """R3 for listener rows ``(id, awaited id, address)``: one ``unblock`` each carrying its
    promise's record, then forget them."""
    for _, awaited_id, address in listeners:
        outbox.unblock(records[awaited_id], address, now)
    rows.delete_ids(Listener, [row[0] for row in listeners])
    return len(listeners)


LISTENER_COLUMNS = ("id", "awaited_id", "address")
CALLBACK_COLUMNS = ("id", "awaited_id", "awaiter_id")


def subscriptions(settled: list[Promise]) -> tuple[list[Any], list[Any]]:
    """The listener and callback rows of these promises (``LISTENER_COLUMNS``,
    ``CALLBACK_COLUMNS``), read together: one round trip on PostgreSQL."""
    ids = [p.id for p in settled]
    listeners, callbacks = rows.values_in_each(
        [
            (Listener, LISTENER_COLUMNS, "awaited_id", ids),
            (Callback, CALLBACK_COLUMNS, "awaited_id", ids),
        ]
    )
    return listeners, callbacks


def drain_listeners(settled: list[Promise], now: int, found: list[Any]) -> int:
    """R3 for every listener of these settled promises (inline, right after settling); ``found``:
    their rows (``subscriptions``)."""
    if not found:
        return 0
    return unblock_listeners(found, {p.id: promise_record(p, now) for p in settled}, now)


def resume_callbacks(callbacks: list[tuple[int, str, str]], now: int, fx: Effects) -> list[int]:
    """R4 for callback rows ``(id, awaited id, awaiter id)`` whose awaiter can be locked without
    waiting: resume each (deadline guard of C6) and delete its row. Returns the rows left because
    their awaiter was busy.

    Waiting here could deadlock against a suspend that holds the awaiter and wants the awaited
    promise, so a busy awaiter is skipped; the callback step resumes it later.
    """
    by_awaited: dict[str, list[tuple[int, str]]] = {}
    for row_id, awaited_id, awaiter_id in callbacks:
        by_awaited.setdefault(awaited_id, []).append((row_id, awaiter_id))
    done: list[int] = []
    busy: list[int] = []
    for awaited_id, entries in by_awaited.items():
        resumed = set(resume_awaiters(awaited_id, [a for _, a in entries], now, fx))
        for row_id, awaiter_id in entries:
            (done if awaiter_id in resumed else busy).append(row_id)
    rows.delete_ids(Callback, done)
    return busy


def drain_callbacks(settled: list[Promise], now: int, fx: Effects, found: list[Any]) -> int:
    """R4 for the callbacks of these settled promises (inline, right after settling); a callback
    whose awaiter is busy is marked ready for the callback step. ``found``: their rows
    (``subscriptions``)."""
    if not found:
        return 0
    busy = resume_callbacks(found, now, fx)
    if busy:
        Callback.objects.filter(id__in=busy).update(ready=True)
    return len(found) - len(busy)


def resume_awaiters(awaited_id: str, awaiter_ids: list[str], now: int, fx: Effects) -> list[str]:
    """Lock the awaiters that are free (SKIP LOCKED) and resume each; return the ids handled."""
    awaiters = list(
        Promise.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(id__in=sorted(awaiter_ids))
        .order_by("id")
    )
    tasks = {t.promise_id: t for t in Task.objects.filter(promise_id__in=[w.id for w in awaiters])}
    for w in awaiters:
        task = tasks.get(w.id)
        if task is not None:
            resume(task, w, awaited_id, now, fx)
    return [w.id for w in awaiters]
