"""``manage.py resonate``: see ``resonate_project.edges.cli`` for the subcommands."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from resonate_project import __version__
from resonate_project.edges import cli


class Command(BaseCommand):
    help = (
        "Promises, tasks and schedules from the command line: on the local database, or on a "
        "running server with --server URL."
    )

    def get_version(self) -> str:
        return f"django-resonate {__version__} (Django {super().get_version()})"

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        with cli.quiet_pipe():  # `manage.py resonate ... | head -1` stops without a traceback
            try:
                cli.run(options, self.stdout.write)
            except cli.CliError as exc:
                raise CommandError(str(exc)) from exc
