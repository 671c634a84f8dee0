"""Serving the metrics: ``GET /metrics`` on the web port, the optional ``METRICS_PORT`` listener,
and the gauges read from the database at scrape time (docs/how-to/observability.md#metrics).

What the database knows is counted by cheap queries, at most once per ``OUTBOX_TTL_MS`` (outbox
backlog, oldest due message, dead letters: index-backed on a table that is a queue) and per
``STATES_TTL_MS`` (promises and tasks by projected state: grouped counts over whole tables), and
cached per process, so scrapes, however frequent, cost at most that.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from django.db import connection
from django.db.models import Count, Min, Q
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from outbox.models import PUSH_Q, Message
from promises.models import Promise, PromiseState
from resonate_project.access.auth import auth_required, authenticate, bearer
from resonate_project.access.principal import AuthError
from resonate_project.core.clock import now_ms
from resonate_project.core.conf import resonate_settings
from resonate_project.observability.metrics import MULTIPROCESS
from tasks_app.models import Task, TaskState

log = logging.getLogger("resonate.metrics")

OUTBOX_TTL_MS = 5_000
STATES_TTL_MS = 30_000
TRANSPORTS = {"sse": Q(poll_route__isnull=False), "push": PUSH_Q}


def outbox_gauges(now: int) -> list[Metric]:
    """Messages waiting (not dead, not undeliverable) and how long the oldest due one has been
    due, by transport; dead letters and undeliverable messages (the ``outbox_dead`` partial
    index)."""
    waiting = GaugeMetricFamily(
        "resonate_outbox_messages", "Outbox messages waiting (not dead)", labels=["transport"]
    )
    oldest = GaugeMetricFamily(
        "resonate_outbox_oldest_due_seconds",
        "How long the longest-due outbox message has been due (0: none due)",
        labels=["transport"],
    )
    live = Message.objects.filter(dead_at__isnull=True)
    for transport, where in TRANSPORTS.items():
        rows = live.filter(where)
        waiting.add_metric([transport], rows.count())
        due = rows.filter(next_attempt_at__lte=now).aggregate(m=Min("next_attempt_at"))["m"]
        oldest.add_metric([transport], 0 if due is None else (now - due) / 1000)
    dead = GaugeMetricFamily("resonate_dead_letters", "Outbox messages dead-lettered")
    aside = Message.objects.filter(dead_at__isnull=False)
    dead.add_metric([], aside.filter(undeliverable_at__isnull=True).count())
    undeliverable = GaugeMetricFamily(
        "resonate_outbox_undeliverable_messages",
        "Unicast poll messages set aside: their stream stayed away UNDELIVERABLE_AFTER_MS",
    )
    undeliverable.add_metric([], aside.filter(undeliverable_at__isnull=False).count())
    return [waiting, oldest, dead, undeliverable]


def _grouped(rows: Iterable[tuple[str, int]]) -> dict[str, int]:
    return dict(rows)


def state_gauges(now: int) -> list[Metric]:
    """Promises and tasks by projected state (C8): a pending promise past its deadline counts as
    resolved (timer) or rejected_timedout; a task whose promise is no longer live as fulfilled."""
    promises = dict.fromkeys(PromiseState.values, 0)
    promises.update(_grouped(Promise.objects.order_by().values_list("state").annotate(Count("pk"))))
    expired = Promise.objects.order_by().filter(state=PromiseState.PENDING, timeout_at__lte=now)
    for timer, n in expired.values_list("timer").annotate(Count("pk")):
        promises[PromiseState.PENDING] -= n
        promises[PromiseState.RESOLVED if timer else PromiseState.REJECTED_TIMEDOUT] += n
    tasks = dict.fromkeys(TaskState.values, 0)
    tasks.update(_grouped(Task.objects.order_by().values_list("state").annotate(Count("pk"))))
    live = Q(promise__state=PromiseState.PENDING, promise__timeout_at__gt=now)
    dead = Task.objects.order_by().exclude(state=TaskState.FULFILLED).exclude(live)
    for state, n in dead.values_list("state").annotate(Count("pk")):
        tasks[state] -= n
        tasks[TaskState.FULFILLED] += n
    p = GaugeMetricFamily("resonate_promises", "Promises by projected state", labels=["state"])
    t = GaugeMetricFamily("resonate_tasks", "Tasks by projected state", labels=["state"])
    for family, counts in ((p, promises), (t, tasks)):
        for state, n in counts.items():
            family.add_metric([state], n)
    return [p, t]


class DatabaseCollector:
    """The database-derived gauges, each group recomputed at most once per its TTL. A failed
    query keeps the last values (a scrape never fails because the database does)."""

    def __init__(self, close_connection: bool = False) -> None:
        # The METRICS_PORT listener answers each scrape on a new thread: close its connection.
        self.close_connection = close_connection
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[int, list[Metric]]] = {}

    def collect(self) -> Iterable[Metric]:
        if not resonate_settings().METRICS:
            return []
        now = now_ms()
        out: list[Metric] = []
        with self._lock:
            try:
                out += self._cached("outbox", OUTBOX_TTL_MS, now, outbox_gauges)
                out += self._cached("states", STATES_TTL_MS, now, state_gauges)
            finally:
                if self.close_connection:
                    connection.close()
        return out

    def _cached(
        self, name: str, ttl: int, now: int, compute: Callable[[int], list[Metric]]
    ) -> list[Metric]:
        at, families = self._cache.get(name, (0, []))
        if at and now - at < ttl:
            return families
        try:
            families = compute(now)
        except Exception:
            log.exception("metrics: counting %s failed; serving the last values", name)
            return families
        self._cache[name] = (now, families)
        return families


class _ThisProcess:
    """The default registry's series (single-process mode)."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def scrape_registry(close_connection: bool = False) -> CollectorRegistry:
    """Every series of the deployment: the multiprocess files when ``PROMETHEUS_MULTIPROC_DIR``
    is set (all processes on this machine), else this process's own; plus the database gauges."""
    registry = CollectorRegistry(auto_describe=False)
    if MULTIPROCESS:
        MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    registry.register(DatabaseCollector(close_connection))
    return registry


_web_registry: CollectorRegistry | None = None


def refuse_scrape(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics: auth not required, an active staff session,
    or any valid credential (prefix and groups do not narrow metrics); else 401."""
    if not auth_required():
        return None
    user = getattr(request, "user", None)
    if user is not None and user.is_active and user.is_staff:
        return None
    try:
        authenticate(bearer(request.headers.get("Authorization")), now_ms())
    except AuthError as exc:
        response = JsonResponse({"error": str(exc)}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="resonate"'
        return response
    return None


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: the Prometheus text format."""
    global _web_registry
    refusal = refuse_scrape(request)
    if refusal is not None:
        return refusal
    if _web_registry is None:
        _web_registry = scrape_registry()
    return HttpResponse(generate_latest(_web_registry), content_type=CONTENT_TYPE_LATEST)


def start_exporter() -> bool:
    """With ``METRICS_PORT`` set, serve the metrics on ``METRICS_HOST:METRICS_PORT`` (no
    credential: keep it private) from this process. Another process of the deployment already
    listening there is not an error: in multiprocess mode it serves the same aggregate."""
    conf = resonate_settings()
    if conf.METRICS_PORT <= 0 or not conf.METRICS:
        return False
    try:
        start_http_server(conf.METRICS_PORT, addr=conf.METRICS_HOST, registry=scrape_registry(True))
    except OSError as exc:
        log.info("metrics: not listening on %s:%s (%s)", conf.METRICS_HOST, conf.METRICS_PORT, exc)
        return False
    log.info("metrics: serving on http://%s:%s/metrics", conf.METRICS_HOST, conf.METRICS_PORT)
    return True
