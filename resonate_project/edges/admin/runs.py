"""A run's page in the admin (``PromiseAdmin.run_page``): the call tree under a root as a
timeline, the tasks of its calls (versions, releases, leases), its listeners and callbacks, and the
outbox messages still owed for it. A fixed handful of queries: one per tree level, then one each
for the listeners, the callbacks and the messages, however many calls the run made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Model, Q
from django.urls import NoReverseMatch
from django.utils.html import format_html
from django.utils.safestring import SafeString

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from promises.selectors import run_promises
from resonate_project.core.present import span
from resonate_project.core.protocol import projected_state, viewed_task_state
from resonate_project.edges.admin.kit import (
    EMPTY,
    RELATED_SHOWN,
    STATE_COLOURS,
    TREE_NODES,
    link,
    state_badge,
    when,
)
from tasks_app.models import Task


def promise_state_html(p: Promise, now: int) -> SafeString:
    return state_badge(projected_state(p, now)[0])


def task_of(p: Promise) -> Task | None:
    try:
        return p.task
    except Task.DoesNotExist:
        return None


BAR_MIN_PERCENT = 0.4  # an instant call still shows as a sliver on the timeline


def function_html(p: Promise) -> SafeString | str:
    """What the promise runs: the function the SDK named, else what kind of promise it is."""
    if p.function:
        return format_html('<span class="resonate-function">{}</span>', p.function)
    if p.timer:
        return format_html('<span class="quiet">{}</span>', "sleep (timer)")
    if p.target is None and p.parent and p.parent != p.id:
        return format_html('<span class="quiet">{}</span>', "local call")
    return EMPTY


@dataclass(frozen=True)
class Step:
    """One promise of the run, placed on the timeline (percentages of the run's span)."""

    promise: Promise
    depth: int
    state: str
    start: int
    end: int | None
    offset: int
    left: float
    width: float
    task: Task | None
    task_state: str | None
    link: SafeString
    function: SafeString | str

    root_start: int
    now: int
    site: str

    @property
    def badge(self) -> SafeString:
        return state_badge(self.state)

    @property
    def colour(self) -> str:
        return STATE_COLOURS.get(self.state, "#555")

    @property
    def task_badge(self) -> SafeString | str:
        return EMPTY if self.task_state is None else state_badge(self.task_state)

    @property
    def task_link(self) -> SafeString | str:
        return EMPTY if self.task is None else site_link(self.task, self.promise.id, self.site)

    @property
    def lease(self) -> SafeString | str:
        return EMPTY if self.task is None else when(self.task.expires_at, self.now)

    @property
    def retry(self) -> SafeString | str:
        return EMPTY if self.task is None else when(self.task.retry_at, self.now)

    @property
    def last_release(self) -> SafeString | str:
        return EMPTY if self.task is None else when(self.task.last_release_at, self.now)

    @property
    def duration(self) -> str:
        return EMPTY if self.end is None else span(self.end - self.start)

    @property
    def attempts(self) -> str:
        """How often its task was acquired (the version: a resume after a sleep or an await is
        an acquire too) and released without progress since it last made some."""
        if self.task is None:
            return EMPTY
        return f"{self.task.version} / {self.task.release_count}"

    @property
    def started(self) -> str:
        return f"+{span(self.offset)}"

    @property
    def ended(self) -> str:
        return EMPTY if self.end is None else f"+{span(self.end - self.root_start)}"


def depths(promises: list[Promise]) -> dict[str, int]:
    depth = {promises[0].id: 0}
    for p in promises[1:]:
        depth[p.id] = depth.get(p.parent or "", 0) + 1
    return depth


def ordered(promises: list[Promise]) -> list[Promise]:
    """Depth first, each parent's children oldest first (the BFS came level by level)."""
    children: dict[str, list[Promise]] = {}
    for p in promises[1:]:
        children.setdefault(p.parent or "", []).append(p)
    out: list[Promise] = []
    stack = [promises[0]]
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(reversed(children.get(p.id, [])))
    return out


def steps(root: Promise, promises: list[Promise], now: int, site: str) -> tuple[list[Step], int]:
    """The calls placed on the timeline, and the span it covers (ms)."""
    depth = depths(promises)
    ends = [projected_state(p, now)[1] for p in promises]
    first = min(p.created_at for p in promises)
    last = max([now if e is None else e for e in ends] + [first + 1])
    total = last - first
    shown = []
    for p in ordered(promises):
        state, end = projected_state(p, now)
        stop = now if end is None else end
        left = 100 * (p.created_at - first) / total
        width = max(100 * (stop - p.created_at) / total, BAR_MIN_PERCENT)
        task = task_of(p)
        shown.append(
            Step(
                promise=p,
                depth=depth.get(p.id, 0),
                state=state,
                start=p.created_at,
                end=end,
                offset=p.created_at - root.created_at,
                left=round(min(left, 100 - BAR_MIN_PERCENT), 2),
                width=round(min(width, 100 - left), 2),
                task=task,
                task_state=None if task is None else viewed_task_state(task, p, now),
                link=link(p, site=site),
                function=function_html(p),
                root_start=root.created_at,
                now=now,
                site=site,
            )
        )
    return shown, total


@dataclass(frozen=True)
class Owed:
    """An outbox row of the run, with where it stands at the page's now."""

    message: Message
    link: SafeString | str
    status: str

    def __getattr__(self, name: str) -> Any:
        return getattr(self.message, name)


def site_link(obj: Model, text: str, site: str) -> SafeString | str:
    """A link to ``obj`` on this site, or ``text`` where the site does not show its model (a host
    may register the promises' admin alone)."""
    try:
        return link(obj, text, site)
    except NoReverseMatch:
        return text


def message_status(m: Message, now: int) -> str:
    if m.undeliverable_at is not None:
        return "undeliverable (no stream for its address)"
    if m.dead_at is not None:
        return "dead letter"
    if m.next_attempt_at > now:
        return "in flight" if m.attempts else "waiting (not due yet)"
    return "due"


def messages_for(ids: list[str]) -> list[Message]:
    """The outbox rows still owed for these promises: their tasks' ``execute`` and the
    ``unblock``s of their listeners (keyed ``<id>:notify:<address>``, a range on the key)."""
    if not ids:
        return []
    unblocks = Q()
    for i in ids:
        unblocks |= Q(key__gt=f"{i}:notify:", key__lt=f"{i}:notify;")
    return list(
        Message.objects.filter(Q(kind="execute", task_id__in=ids) | (Q(kind="unblock") & unblocks))
        .defer("promise")
        .order_by("created_at", "key")[:RELATED_SHOWN]
    )


def run_context(root: Promise, now: int, site: str) -> dict[str, Any]:
    promises, cut = run_promises(root, TREE_NODES)
    ids = [p.id for p in promises]
    shown, total = steps(root, promises, now, site)
    state, end = projected_state(root, now)
    listeners = list(
        Listener.objects.filter(awaited_id__in=ids).order_by("awaited_id", "address")[
            :RELATED_SHOWN
        ]
    )
    callbacks = list(
        Callback.objects.filter(awaiter_id__in=ids).order_by("awaiter_id", "awaited_id")[
            :RELATED_SHOWN
        ]
    )
    messages = [
        Owed(m, site_link(m, "message", site), message_status(m, now)) for m in messages_for(ids)
    ]
    return {
        "root": root,
        "root_state": state,
        "root_badge": state_badge(state),
        "root_function": function_html(root),
        "root_end": end,
        "root_duration": span((now if end is None else end) - root.created_at),
        "now": now,
        "steps": shown,
        "span": span(total),
        "cut": cut,
        "limit": TREE_NODES,
        "tasks": [s for s in shown if s.task is not None],
        "failures": sum(1 for s in shown if s.state.startswith("rejected")),
        "listeners": listeners,
        "callbacks": callbacks,
        "owed": messages,
    }
