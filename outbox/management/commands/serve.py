"""``manage.py serve``: the ASGI server. With no ``CELERY_BROKER_URL`` it is the complete embedded
server (internal steps and HTTP push run in-process); with a broker it serves requests and SSE
while Celery beat and workers do the rest."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from resonate_project import __version__
from resonate_project.core.conf import resonate_settings
from resonate_project.engine.wake import celery_enabled
from resonate_project.runtime.bind import decide_bind

STANDALONE_STORAGE = "resonate_project.static.Storage"


class Command(BaseCommand):
    help = "Serve the Resonate protocol: POST / and GET /poll/{group}/{id}."

    def get_version(self) -> str:
        return f"django-resonate {__version__} (Django {super().get_version()})"

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--host",
            default=os.environ.get("HOST", "127.0.0.1"),
            help="address to listen on (default: HOST, else 127.0.0.1); any non-loopback address "
            "needs RESONATE_AUTH and DJANGO_SECRET_KEY",
        )
        parser.add_argument(
            "--port",
            type=int,
            default=int(os.environ.get("PORT", "8001")),
            help="port to listen on (default: PORT, else 8001)",
        )
        parser.add_argument(
            "--workers",
            type=int,
            default=int(os.environ.get("WEB_CONCURRENCY", "1")),
            help="web processes (only without --embedded: the embedded threads live in one)",
        )
        parser.add_argument(
            "--embedded",
            action=__import__("argparse").BooleanOptionalAction,
            default=None,
            help="run steps and push delivery in-process (default: when no broker is set)",
        )

    def _metrics(self, workers: int) -> None:
        # This process supervises the workers: with PROMETHEUS_MULTIPROC_DIR its listener serves
        # them all; without it, only one process's metrics can be seen
        # (docs/how-to/observability.md#several-processes).
        from resonate_project.observability import export, metrics

        if workers > 1 and not metrics.MULTIPROCESS and resonate_settings().METRICS:
            self.stderr.write(
                self.style.WARNING(
                    "metrics: set PROMETHEUS_MULTIPROC_DIR to an empty directory to aggregate "
                    "the web processes' metrics; each /metrics shows one process otherwise"
                )
            )
        export.start_exporter()

    def handle(self, *args: Any, **options: Any) -> None:
        import uvicorn

        from resonate_project.observability import tracing

        tracing.configure()  # this process (the embedded threads); each web process does too
        decision = decide_bind(
            options["host"],
            auth=resonate_settings().AUTH,
            secret_key=settings.SECRET_KEY,
            allowed_hosts=settings.ALLOWED_HOSTS,
        )
        if decision.refusals:
            raise CommandError("\n".join(decision.refusals))
        for warning in decision.warnings:
            self.stderr.write(self.style.WARNING(warning))
        # The standalone settings' storage collects its files here, before any process serves
        # them; a host's own storage is left alone, and needs no WhiteNoise installed
        # (resonate_project/static.py).
        if settings.STORAGES.get("staticfiles", {}).get("BACKEND") == STANDALONE_STORAGE:
            from resonate_project.static import collect_if_stale

            collect_if_stale(self.stdout.write)
        embedded = options["embedded"]
        if embedded is None:
            embedded = not celery_enabled()
        if embedded:
            import resonate_project.runtime.embedded

            resonate_project.runtime.embedded.start()
        workers = 1 if embedded else max(1, options["workers"])
        self._metrics(workers)
        mode = "embedded" if embedded else f"web x{workers} (Celery runs steps and push)"
        address = f"http://{options['host']}:{options['port']}"
        self.stdout.write(f"django-resonate {__version__} serving on {address} ({mode})")
        uvicorn.run(
            "resonate_project.asgi:application",
            # httptools with limits on a request's head: MAX_HEADER_BYTES, HEADER_TIMEOUT_MS and
            # KEEPALIVE_TIMEOUT_MS (uvicorn has no header timeout, and its size limit is h11's).
            http="resonate_project.asgi:HttpProtocol",
            host=options["host"],
            port=options["port"],
            log_level=os.environ.get("UVICORN_LOG_LEVEL", "warning"),
            lifespan="on",  # starts each web process's request-count flusher (asgi.py)
            workers=workers,
            # Open SSE streams never end by themselves: do not wait for them at shutdown.
            timeout_graceful_shutdown=2,
        )
