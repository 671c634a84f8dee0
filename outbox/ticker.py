"""The embedded metronome: runs the internal steps every TICK_INTERVAL_MS in a daemon thread of
the server process, for the one-command server that has no Celery beat."""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections

from resonate_project.core.clock import now_ms
from resonate_project.core.conf import resonate_settings
from resonate_project.engine.debug import paused
from resonate_project.engine.steps import run_due

log = logging.getLogger("resonate.ticker")


def tick_once() -> int:
    if paused():
        return 0
    return run_due(now_ms(), resonate_settings().STEP_BATCH)


def _loop(stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            close_old_connections()
            tick_once()
        except Exception:
            log.exception("internal steps failed; trying again next tick")
        stop.wait(resonate_settings().TICK_INTERVAL_MS / 1000)


def start() -> threading.Event:
    stop = threading.Event()
    threading.Thread(target=_loop, args=(stop,), name="resonate-ticker", daemon=True).start()
    return stop
