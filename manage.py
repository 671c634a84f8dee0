#!/usr/bin/env python
import os
import sys


def main() -> None:
    if sys.argv[1:2] == ["resonate"]:
        # A call to a running server (--server) needs no Django set up: the CLI's thin path.
        from resonate_project.edges import cli

        if cli.wants_server(sys.argv[2:]):
            status = cli.main_remote(sys.argv[2:])
            if status is not None:
                sys.exit(status)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
