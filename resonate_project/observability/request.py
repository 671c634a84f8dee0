"""One observation per envelope request: metrics, a trace span and a log line around it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from resonate_project.observability import logs, metrics, tracing
from resonate_project.runtime import traffic


@dataclass
class RequestObservation:
    kind: str = ""
    ids: list[str] = field(default_factory=list)
    status: int = 0
    corr_id: str = ""
    # Whether a span or a log line will report the ids (finding them costs more than a request's
    # metrics: off, the envelope leaves ``ids`` empty).
    detailed: bool = False


@contextmanager
def request_scope() -> Iterator[RequestObservation]:
    """Wraps the handling of one envelope; the caller fills in kind, ids, status and corrId.
    With tracing on, the request's span is the current span inside."""
    span = tracing.RequestSpan() if tracing.enabled() else None
    recording = span is not None and span.span.is_recording()  # not sampled out
    obs = RequestObservation(detailed=recording or logs.request_line_enabled())
    start = time.perf_counter()
    try:
        yield obs
    finally:
        elapsed = time.perf_counter() - start
        status = obs.status or 500
        metrics.record_request(obs.kind, status, elapsed)
        traffic.record(status)
        trace_id = ""
        if span is not None:
            trace_id = span.trace_id()
            span.end(obs.kind, obs.ids, status, obs.corr_id)
        if obs.detailed:
            logs.log_request(obs.kind, obs.ids, status, elapsed, obs.corr_id, trace_id)
