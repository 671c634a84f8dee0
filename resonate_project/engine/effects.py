"""What a transition leaves for the internal steps (run inline by ``engine.uow``).

A handler first applies exactly the abstract machine's transition (spec §4). The steps that
transition enables for the objects it touched (dispatch of a task made due, the listener and
callback drains of a promise it settled) then run in the same transaction, so a worker hears
at once instead of at the next sweep. While ``debug.start`` has paused the steps they do not
run: the settled promise's subscriptions are only marked ready for ``debug.tick``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from promises.models import Promise

if TYPE_CHECKING:
    from tasks_app.models import Task


@dataclass
class Effects:
    due: list[tuple[Task, Promise]] = field(default_factory=list)
    settled: list[Promise] = field(default_factory=list)
    completed: list[Task] = field(default_factory=list)

    def became_pending(self, task: Task, promise: Promise) -> None:
        self.due.append((task, promise))

    def settled_promise(self, promise: Promise) -> None:
        self.settled.append(promise)

    def completed_task(self, task: Task) -> None:
        self.completed.append(task)
