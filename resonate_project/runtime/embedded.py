"""The embedded server: with no broker configured, the same step and drain code that Celery beat
and the Celery worker run in production runs in threads of the web process (``manage.py serve``,
or a host's ASGI app wrapped by ``resonate_project.embed.asgi.wrap``, for the app's lifespan)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import close_old_connections, connections

from outbox import push
from resonate_project.core.conf import resonate_settings
from resonate_project.engine import wake
from resonate_project.runtime import ticker

log = logging.getLogger("resonate.embedded")


def _push_loop(pushed: threading.Event, stop: threading.Event) -> None:
    try:
        while not stop.is_set():
            pushed.wait(resonate_settings().POLL_FALLBACK_MS / 1000)
            if stop.is_set():
                return
            pushed.clear()
            try:
                close_old_connections()
                push.drain_push(resonate_settings().DRAIN_BATCH)
            except Exception:
                log.exception("push delivery failed; retrying")
    finally:
        connections.close_all()  # this thread's: a stopped push loop holds no connection


def start() -> Callable[[], None]:
    """Starts the ticker and the push thread; returns what stops both (between batches)."""
    runner = ticker.start()
    pushed = threading.Event()
    stop = threading.Event()

    def on_commit(wrote_push: bool) -> None:
        if wrote_push:
            pushed.set()

    wake.subscribe(on_commit)
    threading.Thread(
        target=_push_loop, args=(pushed, stop), name="resonate-push", daemon=True
    ).start()

    def stop_all() -> None:
        runner.stop()
        stop.set()
        pushed.set()
        wake.unsubscribe(on_commit)

    return stop_all
