"""Read queries over promises: the projected-state filter, tag filters and the call tree. Each
takes ``now`` when the projection needs it, locks nothing and writes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import (
    BigIntegerField,
    Case,
    Count,
    F,
    Q,
    QuerySet,
    TextField,
    When,
    Window,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, RowNumber

from promises.models import Promise
from resonate_project.core.protocol import PENDING
from resonate_project.core.protocol import PROMISE_STATES as PROMISE_STATES
from resonate_project.core.tags import SCHEDULE
from resonate_project.engine.scope import visible


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


def promises(state: str | None = None, tags: dict[str, str] | None = None, *, now: int) -> Any:
    """Promises by projected state and exact tags (unordered)."""
    qs = Promise.objects.all()
    if state is not None:
        qs = qs.filter(projected_state_q(state, now))
    if tags:
        qs = filter_tags(qs, "tags", tags)
    return qs


def children_of(parent_ids: Sequence[str], limit: int) -> list[Promise]:
    """The next level of call trees: promises whose ``resonate:parent`` is one of ``parent_ids``
    (with their tasks), oldest first. A root names itself as its parent and is not its own
    child."""
    return list(
        visible(Promise.objects.filter(parent__in=list(parent_ids)))
        .exclude(parent=F("id"))
        .select_related("task")
        .order_by("created_at", "id")[:limit]
    )


# A root: no ``resonate:parent``, or itself (the SDKs tag a root with its own id).
ROOT_Q = Q(parent__isnull=True) | Q(parent=F("id"))


def root_of(p: Promise, limit: int) -> Promise:
    """The top of ``p``'s call tree by ``resonate:parent`` (at most ``limit`` levels up; a parent
    that is gone ends the walk)."""
    seen = {p.id}
    while p.parent and p.parent not in seen and len(seen) <= limit:
        parent = visible(Promise.objects.filter(id=p.parent)).first()
        if parent is None:
            break
        seen.add(parent.id)
        p = parent
    return p


def run_promises(root: Promise, limit: int) -> tuple[list[Promise], bool]:
    """``root`` and the promises below it, level by level (one query per level), each level
    oldest first; at most ``limit`` below it, and whether more were left out."""
    found, seen, level = [root], {root.id}, [root.id]
    while level:
        room = limit - (len(found) - 1)
        children = [c for c in children_of(level, room + 1) if c.id not in seen]
        if len(children) > room:
            found.extend(children[:room])
            return found, True
        found.extend(children)
        seen.update(c.id for c in children)
        level = [c.id for c in children]
    return found, False


# --- per function, over a recent window (the overview's charts) -------------------------------


@dataclass(frozen=True)
class FunctionMinute:
    start: int
    runs: int
    failures: int


@dataclass(frozen=True)
class FunctionStats:
    """One function over the window: calls started per minute (and how many of those failed),
    and the nearest-rank p50/p95 of the durations of the calls that ended in it."""

    function: str
    minutes: list[FunctionMinute]
    ended: int
    p50: int | None
    p95: int | None

    @property
    def runs(self) -> int:
        return sum(m.runs for m in self.minutes)

    @property
    def failures(self) -> int:
        return sum(m.failures for m in self.minutes)


MINUTE_MS = 60_000
FAILED = ("rejected", "rejected_canceled", "rejected_timedout")


def projected_end(now: int) -> Case:
    """When a promise settled, as projected at ``now`` (a deadline passed counts as its end)."""
    return Case(
        When(state=PENDING, timeout_at__lte=now, then=F("timeout_at")),
        default=F("settled_at"),
        output_field=BigIntegerField(),
    )


def failed_q(now: int) -> Q:
    """Projected as failed at ``now``: rejected in any way (a deadline passed on a non-timer
    counts as timed out)."""
    return Q(state__in=FAILED) | Q(state=PENDING, timeout_at__lte=now, timer=False)


def function_stats(now: int, minutes: int, shown: int) -> list[FunctionStats]:
    """The ``shown`` functions with the most calls started in the last ``minutes`` minutes (the
    current one last), in two grouped queries whatever the number of rows: calls and failures per
    function and minute, and the two percentile rows per function (window functions, on SQLite
    and PostgreSQL alike)."""
    last = now // MINUTE_MS * MINUTE_MS
    first = last - (minutes - 1) * MINUTE_MS
    named = visible(Promise.objects.filter(function__isnull=False))
    per_minute = (
        named.filter(created_at__gte=first, created_at__lte=now)
        .annotate(_minute=F("created_at") / MINUTE_MS)
        .values("function", "_minute")
        .annotate(runs=Count("pk"), failures=Count("pk", filter=failed_q(now)))
        .order_by()
    )
    counts: dict[str, dict[int, tuple[int, int]]] = {}
    for row in per_minute:
        counts.setdefault(str(row["function"]), {})[row["_minute"] * MINUTE_MS] = (
            row["runs"],
            row["failures"],
        )
    # A superset the indexes can find (settled in the window, or past a deadline in it), narrowed
    # to the projected end below.
    candidates = named.filter(
        Q(settled_at__gte=first, settled_at__lte=now)
        | Q(state=PENDING, timeout_at__gte=first, timeout_at__lte=now)
    )
    ended = (
        candidates.annotate(_end=projected_end(now))
        .filter(_end__gte=first, _end__lte=now)
        .annotate(_took=F("_end") - F("created_at"))
        .annotate(
            _rank=Window(RowNumber(), partition_by=[F("function")], order_by=F("_took").asc()),
            _n=Window(Count("pk"), partition_by=[F("function")]),
        )
    )
    # Nearest rank: the ceil(p * n)-th duration, in integer arithmetic on both databases.
    picked = ended.filter(
        Q(_rank=(F("_n") * 50 + 99) / 100) | Q(_rank=(F("_n") * 95 + 99) / 100)
    ).values_list("function", "_rank", "_n", "_took")
    latency: dict[str, tuple[int, int | None, int | None]] = {}
    for name, rank, n, took in picked:
        function = str(name)
        _, p50, p95 = latency.get(function, (n, None, None))
        if rank == (n * 50 + 99) // 100:
            p50 = took
        if rank == (n * 95 + 99) // 100:
            p95 = took
        latency[function] = (n, p50, p95)
    names = sorted(
        set(counts) | set(latency),
        key=lambda f: (-sum(r for r, _ in counts.get(f, {}).values()), f),
    )[:shown]
    stats = []
    for name in names:
        by_minute = counts.get(name, {})
        n, p50, p95 = latency.get(name, (0, None, None))
        series = [
            FunctionMinute(start, *by_minute.get(start, (0, 0)))
            for start in range(first, last + 1, MINUTE_MS)
        ]
        stats.append(FunctionStats(name, series, n, p50, p95))
    return stats


def schedule_promises(schedule_id: str, limit: int) -> list[Promise]:
    """The occurrences of a schedule (tag ``resonate:schedule``), newest first, with tasks."""
    qs = filter_tags(Promise.objects.select_related("task"), "tags", {SCHEDULE: schedule_id})
    return list(qs.order_by("-created_at", "-id")[:limit])
