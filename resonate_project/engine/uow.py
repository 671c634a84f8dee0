"""The unit of work: one transaction, the effects its transitions record, and the internal steps
those effects enable, run inline before commit.

A handler first applies exactly the abstract machine's transition (spec §4). The steps that
transition enables for the objects it touched (dispatch of a task made due, the listener and
callback drains of a promise it settled) then run in the same transaction, so a worker hears
at once instead of at the next sweep. While ``debug.start`` has paused the steps they do not
run: the settled promise's subscriptions are only marked ready for ``debug.tick``.

Every writer goes through :func:`unit_of_work`; nothing else calls :func:`finish`, so no writer
can forget the dispatch. Inside a host's own ``transaction.atomic()`` it is a savepoint, and the
outbox rows and wake-ups commit (or roll back) with the host's rows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from django.db import transaction

from promises.models import Callback, Listener, Promise
from resonate_project.core.signals import promise_settled, task_completed
from resonate_project.engine import promise_transitions
from resonate_project.engine.debug import paused
from resonate_project.engine.effects import Effects
from resonate_project.engine.task_transitions import dispatch
from tasks_app.models import Task

log = logging.getLogger("resonate.signals")

_batch = threading.local()


@contextmanager
def joined() -> Iterator[None]:
    """Inside (this thread only): every unit of work joins the enclosing transaction without a
    savepoint of its own. For the envelope's batches (``edges.api``), whose requests share one
    transaction: a refusal is decided before a handler's first write, so it leaves nothing to
    undo, and the batch clears Django's rollback mark for it (``edges.api.together``); any other
    failure rolls the whole batch back."""
    _batch.on = True
    try:
        yield
    finally:
        _batch.on = False


def batched() -> bool:
    """Whether this thread is inside ``joined``."""
    return bool(getattr(_batch, "on", False))


@contextmanager
def unit_of_work(now: int, *, steps: bool = False) -> Iterator[Effects]:
    """``with unit_of_work(now) as fx:`` lock, decide, write (recording into ``fx``), return.

    On a normal exit (a ``return`` inside the block included) the enabled steps run inline,
    unless ``debug.start`` paused them; ``steps=True`` (the internal steps themselves) always runs
    them. An exception rolls everything back and runs nothing.
    """
    with transaction.atomic(savepoint=not batched()):
        fx = Effects()
        yield fx
        if fx.due or fx.settled:
            finish(fx, now, inline=steps or not paused())
        if fx.settled:
            announce(fx)


def announce(fx: Effects) -> None:
    """``promise_settled`` and ``task_completed`` for host code, once this transaction commits
    (inside a host's atomic block: once the host's commits; never if it rolls back)."""
    settled = [(p.id, p.state, p.settled_at) for p in fx.settled]
    states = {id: state for id, state, _ in settled}
    completed = [(t.pk, states[t.pk]) for t in fx.completed]

    def send() -> None:
        for id, state, at in settled:
            _log_failures(promise_settled.send_robust(Promise, id=id, state=state, settled_at=at))
        for id, state in completed:
            _log_failures(task_completed.send_robust(Task, id=id, state=state))

    transaction.on_commit(send)


def _log_failures(results: Sequence[tuple[object, object]]) -> None:
    for receiver, result in results:
        if isinstance(result, Exception):
            log.error("signal receiver %r failed", receiver, exc_info=result)


def finish(fx: Effects, now: int, *, inline: bool) -> None:
    """Run the enabled steps for what ``fx`` recorded (inline), or leave them for the sweeps."""
    # Only external promises can carry callbacks and listeners (C2, C3): skip the queries for
    # the rest, which are most settlements (an SDK's ctx.run steps are internal).
    settled = [p for p in fx.settled if p.external]
    if settled and not inline:
        ids = [p.id for p in settled]
        Callback.objects.filter(awaited_id__in=ids).update(ready=True)
        Listener.objects.filter(awaited_id__in=ids).update(ready=True)
    elif settled:
        # One query each for the whole batch (a timeout sweep settles hundreds at once), both
        # read before either drain writes (neither drain touches the other's rows).
        listeners, callbacks = promise_transitions.subscriptions(settled)
        promise_transitions.drain_listeners(settled, now, listeners)
        promise_transitions.drain_callbacks(settled, now, fx, callbacks)
    if not inline:
        return
    for task, promise in fx.due:
        dispatch(task, promise, now)
