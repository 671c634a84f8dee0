"""Prometheus instruments, recorded where things happen (docs/reference/metrics.md lists every
series, docs/how-to/observability.md#metrics says how to read them).

This module is core-level: it imports nothing but ``prometheus_client`` and the settings, so the
engine (outbox upserts, steps, drains) may record into it. What the database knows (backlog,
dead letters, states) is read at scrape time by ``export``, not recorded here.

Several processes (``serve --workers N``, Celery's prefork children) aggregate when the operator
sets ``PROMETHEUS_MULTIPROC_DIR`` to an empty directory shared by the deployment's processes on
one machine, before they start (``prometheus_client`` chooses its value store at import). The
process gauges then sum the live processes only (``livesum``). With one process nothing is needed.

Every ``record_*`` returns at once when ``RESONATE_METRICS`` is off. A request costs one counter
increment and one histogram observation; children are looked up once per label set and kept.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client import multiprocess as _multiprocess

from resonate_project.core.conf import resonate_settings

# ``*_created`` series exist only in single-process mode; drop them so both modes expose the same.
disable_created_metrics()

MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))

# Lag of internal steps: from milliseconds (a tick) to the minutes of a stalled metronome.
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)

# --- the reference server's series --------------------------------------------------------------
REQUESTS = Counter("resonate_request", "Envelope requests answered", ["kind", "status"])
REQUEST_SECONDS = Histogram(
    "resonate_request_duration_seconds", "Envelope request handling time", ["kind"]
)
MESSAGES = Counter("resonate_messages", "Messages written to the outbox", ["kind"])
DELIVERIES = Counter(
    "resonate_deliveries", "Outbox delivery attempts settled", ["status", "transport"]
)
SCHEDULE_PROMISES = Counter(
    "resonate_schedule_promises", "Promises created by schedules (occurrences)"
)

# --- ours ---------------------------------------------------------------------------------------
REDELIVERIES = Counter(
    "resonate_redeliveries",
    "Messages due again after a try: SSE frames given back, push attempts to retry",
    ["transport"],
)
STALE_SKIPPED = Counter(
    "resonate_outbox_stale_skipped",
    "Outbox messages removed instead of sent because they could no longer be acted on "
    "(an execute whose task is no longer pending at its version)",
    ["kind"],
)
UNDELIVERABLE = Counter(
    "resonate_outbox_undeliverable",
    "Unicast poll messages set aside as undeliverable (no stream for UNDELIVERABLE_AFTER_MS), "
    "and taken back when their stream connected",
    ["event"],
)
STEP_ROWS = Counter("resonate_step_rows", "Rows handled by internal steps", ["step"])
PRUNED = Counter(
    "resonate_pruned",
    "Rows retention deleted (trees, promises, tasks, django_tasks, dead_letters)",
    ["kind"],
)
STEP_SECONDS = Histogram(
    "resonate_step_duration_seconds", "Internal step runs (one transaction each)", ["step"]
)
STEP_LAG = Histogram(
    "resonate_step_lag_seconds",
    "How late after its deadline a timeout, retry, lease expiry or schedule occurrence was applied",
    ["step"],
    buckets=LAG_BUCKETS,
)
SSE_STREAMS = Gauge("resonate_sse_streams", "SSE streams connected", multiprocess_mode="livesum")
PUSH_IN_FLIGHT = Gauge(
    "resonate_push_in_flight", "HTTP push requests in flight", multiprocess_mode="livesum"
)

if MULTIPROCESS:
    # A process that exits normally takes its live gauges with it; Celery's prefork children
    # exit with os._exit and are marked dead by a worker signal (resonate_project.celery).
    atexit.register(lambda: _multiprocess.mark_process_dead(os.getpid()))

# The request kinds a label may name (edges.kinds.KINDS'; tests/observability/test_metrics.py
# keeps them equal).
# Any other string a client sends is labelled "other": label values must not be client-chosen,
# or every new string would add series for as long as the process lives.
REQUEST_KINDS = frozenset(
    {
        *(f"promise.{k}" for k in ("create", "get", "register_callback", "register_listener")),
        *(f"promise.{k}" for k in ("search", "settle")),
        *(f"schedule.{k}" for k in ("create", "delete", "get", "search")),
        *(f"task.{k}" for k in ("acquire", "continue", "create", "fence", "fulfill", "get")),
        *(f"task.{k}" for k in ("halt", "heartbeat", "release", "search", "suspend")),
        *(f"debug.{k}" for k in ("reset", "snap", "start", "stop", "tick")),
        "",
    }
)

_request_children: dict[tuple[str, int], tuple[Counter, Histogram]] = {}


def record_request(kind: str, status: int, seconds: float) -> None:
    """One envelope request answered: ``kind`` ("" when unparseable), HTTP ``status``."""
    if not resonate_settings().METRICS:
        return
    children = _request_children.get((kind, status))
    if children is None:
        if kind not in REQUEST_KINDS:
            kind = "other"
        children = (REQUESTS.labels(kind, str(status)), REQUEST_SECONDS.labels(kind))
        _request_children[(kind, status)] = children
    children[0].inc()
    children[1].observe(seconds)


def record_message(kind: str) -> None:
    """One outbox upsert (``execute`` or ``unblock``)."""
    if resonate_settings().METRICS:
        MESSAGES.labels(kind).inc()


def record_deliveries(transport: str, delivered: int = 0, failed: int = 0) -> None:
    """Messages delivered (SSE: confirmed; push: a 2xx) and failed attempts (push)."""
    if not resonate_settings().METRICS:
        return
    if delivered:
        DELIVERIES.labels("delivered", transport).inc(delivered)
    if failed:
        DELIVERIES.labels("failed", transport).inc(failed)


def record_redeliveries(transport: str, n: int) -> None:
    if n and resonate_settings().METRICS:
        REDELIVERIES.labels(transport).inc(n)


def record_stale_skipped(kind: str, n: int) -> None:
    if n and resonate_settings().METRICS:
        STALE_SKIPPED.labels(kind).inc(n)


def record_undeliverable(event: str, n: int) -> None:
    """``event``: "set_aside" or "revived"."""
    if n and resonate_settings().METRICS:
        UNDELIVERABLE.labels(event).inc(n)


def record_schedule_promise() -> None:
    if resonate_settings().METRICS:
        SCHEDULE_PROMISES.inc()


def record_step(step: str, rows: int, seconds: float) -> None:
    """One run of an internal step: its rows and duration (runs: the histogram's count)."""
    if not resonate_settings().METRICS:
        return
    STEP_SECONDS.labels(step).observe(seconds)
    if rows:
        STEP_ROWS.labels(step).inc(rows)


def record_pruned(counts: dict[str, int]) -> None:
    """What one retention pass deleted, by kind."""
    if not resonate_settings().METRICS:
        return
    for kind, n in counts.items():
        if n:
            PRUNED.labels(kind).inc(n)


def record_lag(step: str, now: int, deadlines: Iterable[int]) -> None:
    """How late (``now`` minus each deadline, in ms) a step applied what was due."""
    if not resonate_settings().METRICS:
        return
    child = STEP_LAG.labels(step)
    for deadline in deadlines:
        child.observe(max(now - deadline, 0) / 1000)


def set_sse_streams(n: int) -> None:
    if resonate_settings().METRICS:
        SSE_STREAMS.set(n)


def add_push_in_flight(delta: int) -> None:
    if delta and resonate_settings().METRICS:
        PUSH_IN_FLIGHT.inc(delta)
