"""``manage.py serve``: the complete server in one process (ASGI app plus the internal steps)."""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Serve the Resonate protocol (POST /) with the internal steps running in-process."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "0.0.0.0"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8001")))
        parser.add_argument("--no-steps", action="store_true", help="do not run internal steps")

    def handle(self, *args: Any, **options: Any) -> None:
        import uvicorn

        from outbox import ticker

        if not options["no_steps"]:
            ticker.start()
        self.stdout.write(f"django-resonate serving on http://{options['host']}:{options['port']}")
        uvicorn.run(
            "resonate_project.asgi:application",
            host=options["host"],
            port=options["port"],
            log_level="warning",
            lifespan="off",
        )
