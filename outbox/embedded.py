"""The embedded server: with no broker configured, the same step and drain code that Celery beat
and the Celery worker run in production runs in threads of the web process."""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections

from outbox import push, ticker
from resonate_project.core.conf import resonate_settings
from resonate_project.engine import wake as notify

log = logging.getLogger("resonate.embedded")


def _push_loop(wake: threading.Event) -> None:
    while True:
        wake.wait(resonate_settings().POLL_FALLBACK_MS / 1000)
        wake.clear()
        try:
            close_old_connections()
            push.drain_push(resonate_settings().DRAIN_BATCH)
        except Exception:
            log.exception("push delivery failed; retrying")


def start() -> None:
    ticker.start()
    wake = threading.Event()

    def on_commit(pushed: bool) -> None:
        if pushed:
            wake.set()

    notify.subscribe(on_commit)
    threading.Thread(target=_push_loop, args=(wake,), name="resonate-push", daemon=True).start()
