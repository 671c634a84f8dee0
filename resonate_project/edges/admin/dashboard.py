"""The operator overview (``/admin/overview/``): the numbers an operator looks at first, each a
link to the admin list that shows its rows. Every number is one grouped query at one ``now`` (the
same filters the lists use), so the page costs a fixed handful of queries however large the
tables are. Sections follow the admin's view permissions; the request rate is shown to any staff
user who may see at least one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Case, CharField, Count, F, Max, Min, Model, Q, Sum, Value, When
from django.db.models.functions import Coalesce, StrIndex, Substr
from django.db.models.lookups import GreaterThan
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from outbox.hub import PROCESS, get_hub
from outbox.models import PUSH_Q, Message, RequestMinute, Subscriber
from promises.models import Promise
from promises.selectors import PROMISE_STATES, FunctionStats, function_stats, projected_state_q
from resonate_project.core.present import iso
from resonate_project.edges.admin.kit import changelist_url, duration, request_now, state_badge
from resonate_project.engine import retention
from resonate_project.engine.outbox import subscriber_fresh_after
from resonate_project.runtime.traffic import MINUTE_MS
from schedules.models import Schedule
from tasks_app.models import Task, TaskState
from tasks_app.selectors import TASK_STATES, viewed_state_q

WINDOW_MINUTES = 60
FAILING_SHOWN = 10
ERROR_CHARS = 120


@dataclass(frozen=True)
class Figure:
    """A number and the admin list that shows its rows; ``oldest`` is an age in ms, if any."""

    label: str
    count: int
    url: str
    oldest: int | None = None
    badge: SafeString | None = None

    @property
    def age(self) -> str:
        return "" if self.oldest is None else duration(self.oldest)


@dataclass(frozen=True)
class Backlog:
    transport: str
    live: Figure
    due: Figure


@dataclass(frozen=True)
class Destination:
    """A push destination (scheme and host) with messages tried more than once."""

    name: str
    messages: int
    dead: int
    attempts: int
    last_error: str
    url: str


@dataclass(frozen=True)
class Minute:
    start: int
    ok: int
    client_errors: int
    server_errors: int

    @property
    def total(self) -> int:
        return self.ok + self.client_errors + self.server_errors


# --- selectors (one grouped query each) -----------------------------------------------------------


def by_state(model: type[Model], states: tuple[str, ...], q: Any, now: int) -> dict[str, int]:
    """Rows per state, ``q(state, now)`` deciding each (the admin filters' own predicates)."""
    state = Case(*(When(q(s, now), then=Value(s)) for s in states), output_field=CharField())
    rows = model._default_manager.annotate(_state=state).values("_state").annotate(n=Count("pk"))
    counts = {row["_state"]: row["n"] for row in rows.order_by()}
    return {s: counts.get(s, 0) for s in states}


def promise_states(now: int) -> list[Figure]:
    counts = by_state(Promise, PROMISE_STATES, projected_state_q, now)
    return [
        Figure(s, n, changelist_url(Promise, state=s), badge=state_badge(s))
        for s, n in counts.items()
    ]


def task_states(now: int) -> list[Figure]:
    counts = by_state(Task, TASK_STATES, viewed_state_q, now)
    return [
        Figure(s, n, changelist_url(Task, state=s), badge=state_badge(s)) for s, n in counts.items()
    ]


def requests_per_minute(now: int) -> list[Minute]:
    """The last ``WINDOW_MINUTES`` minutes, the current one last, zeros where nothing was
    written."""
    last = now // MINUTE_MS * MINUTE_MS
    first = last - (WINDOW_MINUTES - 1) * MINUTE_MS
    window = RequestMinute.objects.filter(minute_ms__gte=first, minute_ms__lte=last)
    rows = {r.minute_ms: r for r in window}
    minutes = []
    for start in range(first, last + 1, MINUTE_MS):
        r = rows.get(start)
        minutes.append(
            Minute(start, 0, 0, 0)
            if r is None
            else Minute(start, r.ok, r.client_errors, r.server_errors)
        )
    return minutes


TRANSPORT = Case(
    When(PUSH_Q, then=Value("push")),
    When(address__startswith="poll://", then=Value("poll")),
    default=Value("other"),
    output_field=CharField(),
)


def outbox_backlog(now: int) -> tuple[list[Backlog], Figure, Figure]:
    """Live messages per transport (all, and due now with the oldest one's age), the dead
    letters, and the messages set aside as undeliverable (their stream gone)."""
    live = Q(dead_at__isnull=True)
    due = live & Q(next_attempt_at__lte=now)
    rows = (
        Message.objects.annotate(_transport=TRANSPORT)
        .values("_transport")
        .annotate(
            live=Count("pk", filter=live),
            due=Count("pk", filter=due),
            oldest_due=Min("created_at", filter=due),
            dead=Count("pk", filter=Q(dead_at__isnull=False, undeliverable_at__isnull=True)),
            undeliverable=Count("pk", filter=Q(undeliverable_at__isnull=False)),
        )
        .order_by()
    )
    found = {r["_transport"]: r for r in rows}
    backlog = []
    for transport in ("poll", "push"):
        r = found.get(transport)
        waiting, due_now, oldest_due = (
            (0, 0, None) if r is None else (r["live"], r["due"], r["oldest_due"])
        )
        waiting_url = changelist_url(Message, transport=transport, dead="no")
        due_url = changelist_url(Message, transport=transport, due="now")
        oldest = None if oldest_due is None else now - oldest_due
        backlog.append(
            Backlog(
                transport,
                Figure("waiting", waiting, waiting_url),
                Figure("due now", due_now, due_url, oldest),
            )
        )
    dead = sum(r["dead"] for r in found.values())
    undeliverable = sum(r["undeliverable"] for r in found.values())
    return (
        backlog,
        Figure("dead letters", dead, changelist_url(Message, dead="yes")),
        Figure("undeliverable", undeliverable, changelist_url(Message, dead="undeliverable")),
    )


def destination() -> Case:
    """``scheme://host[:port]`` of an http(s) address, in SQL on both databases: everything up to
    the first ``/`` after the 8th character (``https://`` is 8 long; ``http://h`` is too)."""
    slash = StrIndex(Substr("address", 9), Value("/"))
    return Case(
        When(GreaterThan(slash, 0), then=Substr("address", 1, slash + 7)),
        default="address",
        output_field=CharField(),
    )


def failing_destinations() -> list[Destination]:
    """The ``FAILING_SHOWN`` push destinations with the most messages tried more than once, each
    with the last error of its most tried message (one grouped query, then one per row shown)."""
    failing = Message.objects.filter(PUSH_Q, attempts__gt=1).annotate(_dest=destination())
    rows = (
        failing.values("_dest")
        .annotate(
            messages=Count("pk"),
            dead=Count("pk", filter=Q(dead_at__isnull=False)),
            attempts=Max("attempts"),
        )
        .order_by("-messages", "_dest")[:FAILING_SHOWN]
    )
    shown = []
    for r in rows:
        name = r["_dest"]
        error = (
            failing.filter(_dest=name)
            .exclude(last_error="")
            .order_by("-attempts", "-next_attempt_at")
            .values_list("last_error", flat=True)
            .first()
        ) or ""
        cut = error if len(error) <= ERROR_CHARS else f"{error[:ERROR_CHARS]}…"
        url = changelist_url(Message, transport="push", failing="yes", q=name)
        shown.append(Destination(name, r["messages"], r["dead"], r["attempts"], cut, url))
    return shown


def step_lag(now: int, request: HttpRequest) -> list[Figure]:
    """Work whose time has come and that the internal steps have not applied yet. A second or so
    is one tick; more means the steps are behind or not running."""
    figures: list[Figure] = []
    if may_view(request, Promise):
        p = Promise.objects.filter(state="pending", timeout_at__lte=now).aggregate(
            n=Count("pk"), oldest=Min("timeout_at")
        )
        figures.append(
            lag_figure(
                "promises past their timeout, still stored pending",
                p["n"],
                p["oldest"],
                now,
                changelist_url(Promise, overdue="yes"),
            )
        )
    if may_view(request, Task):
        lease = Q(state=TaskState.ACQUIRED, expires_at__lte=now)
        retry = Q(state=TaskState.PENDING, retry_at__lte=now)
        t = Task.objects.aggregate(
            leases=Count("pk", filter=lease),
            oldest_lease=Min("expires_at", filter=lease),
            retries=Count("pk", filter=retry),
            oldest_retry=Min("retry_at", filter=retry),
        )
        figures.append(
            lag_figure(
                "tasks with an expired lease",
                t["leases"],
                t["oldest_lease"],
                now,
                changelist_url(Task, lease="expired"),
            )
        )
        figures.append(
            lag_figure(
                "tasks with a retry overdue",
                t["retries"],
                t["oldest_retry"],
                now,
                changelist_url(Task, retry="overdue"),
            )
        )
    if may_view(request, Schedule):
        s = Schedule.objects.filter(next_run_at__lte=now).aggregate(
            n=Count("pk"), oldest=Min("next_run_at")
        )
        figures.append(
            lag_figure(
                "schedules past their next run",
                s["n"],
                s["oldest"],
                now,
                changelist_url(Schedule, due="overdue"),
            )
        )
    return figures


def lag_figure(label: str, count: int, since: int | None, now: int, url: str) -> Figure:
    return Figure(label, count, url, None if since is None else now - since)


# --- the chart ----------------------------------------------------------------------------------

BAR, GAP, HEIGHT, LEFT, BOTTOM = 10, 2, 120, 40, 20
COLOURS = {"ok": "#79aec8", "client_errors": "#e0a100", "server_errors": "#c62828"}


def hhmm(ms: int) -> str:
    moment = iso(ms)  # the raw ms past year 9999 (a debug clock may sit there)
    return moment[11:16] if moment.endswith(" UTC") else moment


def requests_chart(minutes: list[Minute]) -> SafeString:
    """Requests per minute as stacked bars (answered, 4xx, 5xx), inline SVG: no script, works
    offline. Each bar's tooltip gives its numbers."""
    top = max([m.total for m in minutes] + [1])
    width = LEFT + len(minutes) * (BAR + GAP)
    bars = []
    for i, m in enumerate(minutes):
        x = LEFT + i * (BAR + GAP)
        y = HEIGHT
        rects = []
        for field in ("ok", "client_errors", "server_errors"):
            n = getattr(m, field)
            if not n:
                continue
            h = max(1, round(n * HEIGHT / top))
            y -= h
            rects.append((x, y, BAR, h, COLOURS[field], field))
        tip = (
            f"{hhmm(m.start)} UTC: {m.total} requests, {m.client_errors} 4xx, {m.server_errors} 5xx"
        )
        body = format_html_join(
            "",
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}" class="{}"/>',
            rects,
        )
        bars.append((m.start, m.total, tip, x, BAR, HEIGHT, body))
    columns = format_html_join(
        "",
        '<g class="minute" data-minute="{}" data-total="{}"><title>{}</title>'
        '<rect x="{}" y="0" width="{}" height="{}" fill="transparent"/>{}</g>',
        bars,
    )
    return format_html(
        '<svg class="resonate-chart" xmlns="http://www.w3.org/2000/svg" width="{w}" '
        'height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="requests per minute, '
        'last hour">'
        '<line x1="{left}" y1="{base}" x2="{w}" y2="{base}" stroke="#999"/>'
        '<text x="{tx}" y="10" font-size="10" text-anchor="end" fill="#666">{top}</text>'
        '<text x="{tx}" y="{base}" font-size="10" text-anchor="end" fill="#666">0</text>'
        "{columns}"
        '<text x="{left}" y="{label}" font-size="10" fill="#666">{first} UTC</text>'
        '<text x="{w}" y="{label}" font-size="10" text-anchor="end" fill="#666">{last} UTC'
        "</text></svg>",
        w=width,
        h=HEIGHT + BOTTOM,
        left=LEFT,
        base=HEIGHT,
        tx=LEFT - 4,
        top=top,
        columns=columns,
        label=HEIGHT + 14,
        first=hhmm(minutes[0].start),
        last=hhmm(minutes[-1].start),
    )


# --- functions, streams and workers ----------------------------------------------------------

FUNCTIONS_SHOWN = 10
# A worker counts as seen recently when it held, heartbeat or released a task, or had a stream,
# within this long.
WORKERS_WINDOW_MS = 10 * 60_000
WORKERS_SHOWN = 50
STREAMS_SHOWN = 100
SPARK_BAR, SPARK_GAP, SPARK_HEIGHT = 4, 1, 36
LATENCY_WIDTH, LATENCY_HEIGHT = 220, 30


@dataclass(frozen=True)
class FunctionRow:
    stats: FunctionStats
    url: str
    failures_url: str
    chart: SafeString
    latency: SafeString

    @property
    def p50(self) -> str:
        return "—" if self.stats.p50 is None else duration(self.stats.p50)

    @property
    def p95(self) -> str:
        return "—" if self.stats.p95 is None else duration(self.stats.p95)


def runs_chart(stats: FunctionStats) -> SafeString:
    """Calls started per minute over the window, the failed part of each bar in red; inline SVG,
    each bar's tooltip gives its numbers."""
    top = max([m.runs for m in stats.minutes] + [1])
    width = len(stats.minutes) * (SPARK_BAR + SPARK_GAP)
    bars = []
    for i, m in enumerate(stats.minutes):
        x = i * (SPARK_BAR + SPARK_GAP)
        h = round(m.runs * SPARK_HEIGHT / top) if m.runs else 0
        failed = round(m.failures * SPARK_HEIGHT / top) if m.failures else 0
        tip = f"{hhmm(m.start)} UTC: {m.runs} started, {m.failures} of them failed"
        bars.append(
            (
                m.start,
                m.runs,
                m.failures,
                tip,
                x,
                SPARK_BAR,
                SPARK_HEIGHT,
                x,
                SPARK_HEIGHT - h,
                SPARK_BAR,
                max(h - failed, 0),
                x,
                SPARK_HEIGHT - failed,
                SPARK_BAR,
                failed,
            )
        )
    body = format_html_join(
        "",
        '<g class="minute" data-minute="{}" data-runs="{}" data-failures="{}"><title>{}</title>'
        '<rect x="{}" y="0" width="{}" height="{}" fill="transparent"/>'
        '<rect x="{}" y="{}" width="{}" height="{}" fill="#79aec8"/>'
        '<rect x="{}" y="{}" width="{}" height="{}" fill="#c62828"/></g>',
        bars,
    )
    return format_html(
        '<svg class="resonate-chart function-runs" xmlns="http://www.w3.org/2000/svg" '
        'width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        'aria-label="{name}: calls started per minute, last hour">'
        '<line x1="0" y1="{h}" x2="{w}" y2="{h}" stroke="#999"/>{body}</svg>',
        w=width,
        h=SPARK_HEIGHT,
        name=stats.function,
        body=body,
    )


def latency_chart(stats: FunctionStats, longest: int) -> SafeString:
    """p50 and p95 as two bars on a scale shared by every function (the longest p95 is full
    width)."""
    scale = LATENCY_WIDTH / max(longest, 1)
    rows = []
    for i, (label, value, colour) in enumerate(
        (("p50", stats.p50, "#417690"), ("p95", stats.p95, "#e0a100"))
    ):
        if value is None:
            continue
        y = i * (LATENCY_HEIGHT // 2)
        w = max(1, round(value * scale))
        rows.append((label, value, y, w, colour, label, duration(value)))
    body = format_html_join(
        "",
        '<g class="{}" data-ms="{}"><rect x="0" y="{}" width="{}" height="12" fill="{}"/>'
        "<title>{}: {}</title></g>",
        rows,
    )
    return format_html(
        '<svg class="resonate-chart function-latency" xmlns="http://www.w3.org/2000/svg" '
        'width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        'aria-label="{name}: p50 and p95 duration, last hour">{body}</svg>',
        w=LATENCY_WIDTH,
        h=LATENCY_HEIGHT,
        name=stats.function,
        body=body,
    )


def function_rows(now: int) -> list[FunctionRow]:
    stats = function_stats(now, WINDOW_MINUTES, FUNCTIONS_SHOWN)
    longest = max([s.p95 or 0 for s in stats] + [1])
    return [
        FunctionRow(
            s,
            changelist_url(Promise, function=s.function),
            changelist_url(Promise, function=s.function, state="rejected"),
            runs_chart(s),
            latency_chart(s, longest),
        )
        for s in stats
    ]


@dataclass(frozen=True)
class StreamRow:
    group: str
    id: str
    process: str
    since: int | None
    seen_at: int
    in_flight: int
    waiting: int

    @property
    def since_text(self) -> str:
        return "—" if self.since is None else iso(self.since)


def connected_streams(now: int) -> tuple[list[StreamRow], dict[str, tuple[int, int]]]:
    """The SSE streams registered by a live web process (a ``Subscriber`` row refreshed lately),
    with the messages leased to their own route (in flight: written, not yet confirmed) and due
    for it; and per group, those addressed to the group as a whole. "Since" is known for the
    streams this process holds (``manage.py serve`` is one process); others show when their
    process last refreshed them."""
    subscribers = list(
        Subscriber.objects.filter(seen_at__gte=subscriber_fresh_after(now)).order_by(
            "group", "stream_id"
        )[:STREAMS_SHOWN]
    )
    routes = {f"{s.group}/{s.stream_id}" for s in subscribers} | {s.group for s in subscribers}
    live = Q(dead_at__isnull=True)
    counts = {
        r["poll_route"]: (r["in_flight"], r["waiting"])
        for r in Message.objects.filter(live, poll_route__in=routes)
        .values("poll_route")
        .annotate(
            in_flight=Count("pk", filter=Q(next_attempt_at__gt=now, attempts__gt=0)),
            waiting=Count("pk", filter=Q(next_attempt_at__lte=now)),
        )
        .order_by()
    }
    opened = get_hub().opened()
    rows = []
    for s in subscribers:
        in_flight, waiting = counts.get(f"{s.group}/{s.stream_id}", (0, 0))
        since = opened.get((s.group, s.stream_id)) if s.process == PROCESS else None
        rows.append(
            StreamRow(s.group, s.stream_id, s.process, since, s.seen_at, in_flight, waiting)
        )
    groups = {s.group: counts.get(s.group, (0, 0)) for s in subscribers}
    return rows, groups


@dataclass(frozen=True)
class WorkerRow:
    pid: str
    last_seen: int
    held: int
    releases: int
    finished: int
    connected: bool
    url: str

    @property
    def last_seen_text(self) -> str:
        return iso(self.last_seen)[:19]


def recent_workers(now: int, streams: list[StreamRow]) -> list[WorkerRow]:
    """Processes seen in the last ``WORKERS_WINDOW_MS``: holding a task (its last acquire or
    heartbeat is the lease's start), having released one, having acquired last a task that was
    fulfilled since (the fulfil is its last word), or with a stream connected (an SDK's stream id
    is its pid). Three grouped queries."""
    since = now - WORKERS_WINDOW_MS
    seen: dict[str, dict[str, Any]] = {}
    held = (
        Task.objects.filter(state=TaskState.ACQUIRED, pid__isnull=False)
        .annotate(_start=F("expires_at") - Coalesce("ttl", 0))
        .values("pid")
        .annotate(n=Count("pk"), last=Max("_start"))
        .order_by()
    )
    for r in held:
        w = seen.setdefault(str(r["pid"]), {"last": 0, "held": 0, "releases": 0})
        w["held"], w["last"] = r["n"], max(w["last"], r["last"] or 0)
    released = (
        Task.objects.filter(last_release_at__gte=since, last_pid__isnull=False)
        .values("last_pid")
        .annotate(n=Sum("release_count"), last=Max("last_release_at"))
        .order_by()
    )
    for rel in released:
        w = seen.setdefault(str(rel["last_pid"]), {"last": 0, "held": 0, "releases": 0})
        w["releases"], w["last"] = rel["n"] or 0, max(w["last"], rel["last"] or 0)
    finished = (
        Task.objects.filter(last_pid__isnull=False, promise__settled_at__gte=since)
        .values("last_pid")
        .annotate(n=Count("pk"), last=Max("promise__settled_at"))
        .order_by()
    )
    for done in finished:
        w = seen.setdefault(str(done["last_pid"]), {"last": 0, "held": 0, "releases": 0})
        w["finished"], w["last"] = done["n"], max(w["last"], done["last"] or 0)
    connected = {s.id for s in streams}
    for s in streams:
        w = seen.setdefault(s.id, {"last": 0, "held": 0, "releases": 0})
        w["last"] = max(w["last"], s.seen_at)
    rows = [
        WorkerRow(
            pid,
            w["last"],
            w["held"],
            w["releases"],
            w.get("finished", 0),
            pid in connected,
            changelist_url(Task, q=pid),
        )
        for pid, w in seen.items()
        if w["last"] >= since or w["held"]
    ]
    rows.sort(key=lambda w: (-w.last_seen, w.pid))
    return rows[:WORKERS_SHOWN]


# --- the page -----------------------------------------------------------------------------------


def retention_figures(now: int) -> dict[str, Any]:
    """Retention's policy, how far behind it is and what it deleted (engine.retention)."""
    found = retention.overview(now)
    policy = found["policy"]
    windows = [
        (label, duration(ms))
        for label, ms in (
            ("settled trees", policy.promises_ms),
            ("Django task results", policy.django_tasks_ms),
            ("dead letters", policy.dead_letters_ms),
        )
        if ms
    ]
    oldest = found["oldest_age"]
    return {
        "windows": windows,
        "oldest": None if oldest is None else duration(oldest),
        "behind": found["behind"],
        "totals": found["totals"],
        "last": iso(found["last_at"]) if found["last_at"] is not None else None,
    }


def may_view(request: HttpRequest, model: type[Model]) -> bool:
    model_admin = admin.site.get_model_admin(model)
    return bool(model_admin.has_view_permission(request))


def overview(request: HttpRequest) -> HttpResponse:
    """The page (behind ``admin.site.admin_view``: staff only, else the login page)."""
    visible = {m: may_view(request, m) for m in (Promise, Task, Message, Schedule)}
    if not any(visible.values()):
        raise PermissionDenied
    now = request_now(request)
    minutes = requests_per_minute(now)
    totals = RequestMinute.objects.filter(minute_ms__gte=minutes[0].start).aggregate(
        ok=Sum("ok"), client=Sum("client_errors"), server=Sum("server_errors")
    )
    ok, client, server = (totals[k] or 0 for k in ("ok", "client", "server"))
    total = ok + client + server
    context: dict[str, Any] = {
        **admin.site.each_context(request),
        "title": "Overview",
        "now": now,
        "requests": {
            "total": total,
            "client_errors": client,
            "server_errors": server,
            "error_rate": f"{100 * (client + server) / total:.1f}%" if total else "—",
            "chart": requests_chart(minutes),
        },
        "lag": step_lag(now, request),
    }
    if visible[Promise]:
        context["promises"] = promise_states(now)
    if visible[Task]:
        context["tasks"] = task_states(now)
    if visible[Message]:
        context["backlog"], context["dead"], context["undeliverable"] = outbox_backlog(now)
        context["failing"] = failing_destinations()
    if visible[Promise]:
        context["functions"] = function_rows(now)
        context["retention"] = retention_figures(now)
    if visible[Message] or visible[Task]:
        streams, groups = connected_streams(now)
        if visible[Message]:
            context["streams"], context["stream_groups"] = streams, groups
        if visible[Task]:
            context["workers"] = recent_workers(now, streams)
            context["workers_window"] = duration(WORKERS_WINDOW_MS)
    return TemplateResponse(request, "admin/resonate_overview.html", context)
