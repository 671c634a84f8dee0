"""What ``manage.py serve`` runs: the bind check, the static files, the in-process runner when
embedded, the metrics listener, then uvicorn's web processes. The command only reads its
options (``outbox/management/commands/serve.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from resonate_project import __version__
from resonate_project.core.conf import resonate_settings
from resonate_project.engine.wake import celery_enabled
from resonate_project.runtime.bind import decide_bind

STANDALONE_STORAGE = "resonate_project.static.Storage"


class Refused(Exception):
    """The address may not be served as configured; the message says why."""


@dataclass(frozen=True)
class Serve:
    host: str
    port: int
    workers: int
    embedded: bool | None  # None: embedded when no broker is set
    out: Callable[[str], object]
    warn: Callable[[str], object]
    # Called with the number of web processes before they start (the command's metrics listener,
    # an edge: resonate_project.observability.export).
    before_serving: Callable[[int], object] = lambda workers: None

    def run(self) -> None:
        import uvicorn

        from resonate_project.observability import tracing

        tracing.configure()  # this process (the embedded threads); each web process does too
        decision = decide_bind(
            self.host,
            auth=resonate_settings().AUTH,
            secret_key=settings.SECRET_KEY,
            allowed_hosts=settings.ALLOWED_HOSTS,
        )
        if decision.refusals:
            raise Refused("\n".join(decision.refusals))
        for warning in decision.warnings:
            self.warn(warning)
        # The standalone settings' storage collects its files here, before any process serves
        # them; a host's own storage is left alone, and needs no WhiteNoise installed
        # (resonate_project/static.py).
        if settings.STORAGES.get("staticfiles", {}).get("BACKEND") == STANDALONE_STORAGE:
            from resonate_project.static import collect_if_stale

            collect_if_stale(self.out)
        embedded = not celery_enabled() if self.embedded is None else self.embedded
        if embedded:
            import resonate_project.runtime.embedded

            resonate_project.runtime.embedded.start()
        workers = 1 if embedded else max(1, self.workers)
        self.before_serving(workers)
        mode = "embedded" if embedded else f"web x{workers} (Celery runs steps and push)"
        self.out(
            f"django-resonate {__version__} serving on http://{self.host}:{self.port} ({mode})"
        )
        uvicorn.run(
            "resonate_project.asgi:application",
            # httptools with limits on a request's head: MAX_HEADER_BYTES, HEADER_TIMEOUT_MS and
            # KEEPALIVE_TIMEOUT_MS (uvicorn has no header timeout, and its size limit is h11's).
            http="resonate_project.asgi:HttpProtocol",
            host=self.host,
            port=self.port,
            log_level=os.environ.get("UVICORN_LOG_LEVEL", "warning"),
            lifespan="on",  # starts each web process's request-count flusher (asgi.py)
            workers=workers,
            # Open SSE streams never end by themselves: do not wait for them at shutdown.
            timeout_graceful_shutdown=2,
        )
