"""``manage.py serve``: the ASGI server. With no ``CELERY_BROKER_URL`` it is the complete embedded
server (internal steps and HTTP push run in-process); with a broker it serves requests and SSE
while Celery beat and workers do the rest. What it runs is ``resonate_project.runtime.serve``."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from resonate_project import __version__
from resonate_project.runtime.serve import Refused, Serve


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

    def _warn(self, line: str) -> None:
        self.stderr.write(self.style.WARNING(line))

    def _metrics(self, workers: int) -> None:
        # This process supervises the workers: with PROMETHEUS_MULTIPROC_DIR its listener serves
        # them all; without it, only one process's metrics can be seen
        # (docs/how-to/observability.md#several-processes).
        from resonate_project.core.conf import resonate_settings
        from resonate_project.observability import export, metrics

        if workers > 1 and not metrics.MULTIPROCESS and resonate_settings().METRICS:
            self._warn(
                "metrics: set PROMETHEUS_MULTIPROC_DIR to an empty directory to aggregate "
                "the web processes' metrics; each /metrics shows one process otherwise"
            )
        export.start_exporter()

    def handle(self, *args: Any, **options: Any) -> None:
        serve = Serve(
            host=options["host"],
            port=options["port"],
            workers=options["workers"],
            embedded=options["embedded"],
            out=self.stdout.write,
            warn=self._warn,
            before_serving=self._metrics,
        )
        try:
            serve.run()
        except Refused as refused:
            raise CommandError(str(refused)) from refused
