"""Requests per minute for the operator overview (``resonate_project.edges.admin.dashboard``).

Counting a request is an in-memory increment (``record``, called once per ``POST /`` by
``request_scope``). Each web process writes what it counted to ``RequestMinute`` from a daemon
thread every ``FLUSH_INTERVAL_S`` (``start``, run by the ASGI lifespan startup of each web
process): not the tick, which runs in Celery workers in production and never sees a request. A
flush adds to the minute's row (shared by all processes, so it increments, never overwrites) and
prunes rows older than ``KEEP_MS``. A process that stops loses at most what it counted since its
last flush, less on a clean shutdown (``stop`` flushes once more).
"""

from __future__ import annotations

import logging
import threading

from django.db import IntegrityError, close_old_connections, connections, transaction
from django.db.models import F

from outbox.models import RequestMinute
from resonate_project.core.clock import now_ms

log = logging.getLogger("resonate.traffic")

MINUTE_MS = 60_000
# One UPDATE per counted minute per process every 10 s: a handful of writes a minute however
# busy the process is, and the overview is at most 10 s behind.
FLUSH_INTERVAL_S = 10.0
KEEP_MS = 24 * 3_600_000
# Minutes held unflushed: a process whose flusher never runs (a site that embeds the envelope view
# without our ASGI app) keeps at most a day of counters, not an ever-growing dict.
PENDING_MINUTES_MAX = KEEP_MS // MINUTE_MS

type Counts = dict[int, list[int]]  # minute start (ms) -> [ok, client_errors, server_errors]

_lock = threading.Lock()
_counts: Counts = {}


def status_class(status: int) -> int:
    """0: answered (below 400), 1: the client's error (4xx), 2: the server's (5xx)."""
    if status < 400:
        return 0
    return 1 if status < 500 else 2


def record(status: int, now: int | None = None) -> None:
    """One request answered with ``status``; the hot path, so memory only."""
    minute = (now_ms() if now is None else now) // MINUTE_MS * MINUTE_MS
    column = status_class(status)
    with _lock:
        row = _counts.get(minute)
        if row is None:
            if len(_counts) >= PENDING_MINUTES_MAX:
                del _counts[min(_counts)]
            row = _counts[minute] = [0, 0, 0]
        row[column] += 1


def take() -> Counts:
    """What was counted since the last take, and a fresh counter."""
    global _counts
    with _lock:
        taken, _counts = _counts, {}
    return taken


def _give_back(counts: Counts) -> None:
    with _lock:
        for minute, row in counts.items():
            mine = _counts.setdefault(minute, [0, 0, 0])
            for i, n in enumerate(row):
                mine[i] += n


def _add(minute: int, ok: int, client: int, server: int) -> None:
    def increment() -> int:
        return RequestMinute.objects.filter(minute_ms=minute).update(
            ok=F("ok") + ok,
            client_errors=F("client_errors") + client,
            server_errors=F("server_errors") + server,
        )

    if increment():
        return
    try:
        # A savepoint: another process may create this minute's row between our two statements.
        with transaction.atomic():
            RequestMinute.objects.create(
                minute_ms=minute, ok=ok, client_errors=client, server_errors=server
            )
    except IntegrityError:
        increment()


def flush(now: int) -> int:
    """Adds this process's counts to ``RequestMinute`` and prunes rows older than ``KEEP_MS``
    before ``now``; returns the requests written. Counts not written (the database failed) are
    kept for the next flush."""
    counts = take()
    written = 0
    minutes = sorted(counts)
    for i, minute in enumerate(minutes):
        try:
            _add(minute, *counts[minute])
        except Exception:
            _give_back({m: counts[m] for m in minutes[i:]})
            raise
        written += sum(counts[minute])
    RequestMinute.objects.filter(minute_ms__lt=now - KEEP_MS).delete()
    return written


class Flusher:
    """The daemon thread of one process that flushes every ``FLUSH_INTERVAL_S``."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="resonate-traffic", daemon=True)

    def _run(self) -> None:
        while True:
            stopping = self.stopping.wait(FLUSH_INTERVAL_S)
            try:
                close_old_connections()
                flush(now_ms())
            except Exception:
                log.exception("request counts not written; trying again at the next flush")
            if stopping:
                connections.close_all()
                return


_flusher: Flusher | None = None


def start() -> None:
    """Starts this process's flusher (once)."""
    global _flusher
    with _lock:
        if _flusher is None:
            _flusher = Flusher()
            _flusher.thread.start()


def stop(timeout_s: float = 5.0) -> None:
    """Flushes once more and ends the flusher (a clean shutdown)."""
    global _flusher
    with _lock:
        flusher, _flusher = _flusher, None
    if flusher is not None:
        flusher.stopping.set()
        flusher.thread.join(timeout_s)
