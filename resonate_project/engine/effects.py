"""What a transition leaves for the internal steps, and running them inline.

A handler first applies exactly the abstract machine's transition (spec §4). The steps that
transition enables for the objects it touched (dispatch of a task made due, the listener and
callback drains of a promise it settled) then run in the same transaction, so a worker hears
at once instead of at the next sweep. While ``debug.start`` has paused the steps they do not
run: the settled promise's subscriptions are only marked ready for ``debug.tick``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from promises.models import Callback, Listener, Promise

if TYPE_CHECKING:
    from tasks_app.models import Task


@dataclass
class Effects:
    due: list[tuple[Task, Promise]] = field(default_factory=list)
    settled: list[Promise] = field(default_factory=list)

    def became_pending(self, task: Task, promise: Promise) -> None:
        self.due.append((task, promise))

    def settled_promise(self, promise: Promise) -> None:
        self.settled.append(promise)


def finish(fx: Effects, now: int, *, inline: bool) -> None:
    """Run the enabled steps for what ``fx`` recorded (inline), or leave them for the sweeps."""
    from resonate_project.engine import promises as services
    from resonate_project.engine.tasks import dispatch

    # Only external promises can carry callbacks and listeners (C2, C3): skip the queries for
    # the rest, which are most settlements (an SDK's ctx.run steps are internal).
    settled = [p for p in fx.settled if p.external]
    if settled and not inline:
        ids = [p.id for p in settled]
        Callback.objects.filter(awaited_id__in=ids).update(ready=True)
        Listener.objects.filter(awaited_id__in=ids).update(ready=True)
    elif settled:
        # One query each for the whole batch (a timeout sweep settles hundreds at once).
        services.drain_listeners(settled, now)
        services.drain_callbacks(settled, now, fx)
    if not inline:
        return
    for task, promise in fx.due:
        dispatch(task, promise, now)
