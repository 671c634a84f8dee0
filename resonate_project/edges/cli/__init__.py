"""``manage.py resonate``: promises, tasks and schedules from the command line, shaped like the
reference server's CLI.

Every subcommand sends protocol requests (the kinds marked ``cli`` in ``edges.kinds``): by
default to the local database through the envelope's own path (``local`` below), or with
``--server URL`` to a running server as envelopes over HTTP (``--token`` adds
``Authorization: Bearer``). Output is
human-readable (aligned columns, UTC datetimes, values decoded from base64 when they are text);
``--json`` prints the protocol's data as JSON instead. The clock is read once per command.

    resonate promises get|create|resolve|reject|cancel|search
    resonate tasks get|search|halt|continue
    resonate schedules get|create|delete|search
    resonate invoke ID --func F [--arg A ...] [--json-args '[...]'] [--timeout 1h]
                       [--target poll://any@default] [--delay 5s]
    resonate tree ID
    resonate credentials create NAME [--prefix P] [--group G ...] [--admin] | revoke NAME | list
    resonate worker [--queue Q ...] [--concurrency N] [--backend ALIAS] [--grace SECONDS]

``worker`` is not a protocol request: it runs the calls enqueued through Django's Tasks
framework (``tasks_app.worker``), on the local database only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

from resonate_project.core import clock
from resonate_project.edges.cli.parser import add_arguments, duration, key_value
from resonate_project.edges.cli.transport import CliError, Ctx, Out, local, remote


def run(options: dict[str, Any], out: Out) -> None:
    now = clock.now_ms()
    server = options.get("server")
    send = remote(server, options.get("token")) if server else local(now)
    options["run"](Ctx(send, now, out, bool(options.get("json"))), argparse.Namespace(**options))


# Options every management command takes (Django's BaseCommand parser; --version aside, which
# ``invoke`` also has): a call naming one goes through Django, which knows them.
DJANGO_OPTIONS = (
    "-v",
    "--verbosity",
    "--settings",
    "--pythonpath",
    "--traceback",
    "--no-color",
    "--force-color",
    "--skip-checks",
)


def wants_server(argv: list[str]) -> bool:
    """Whether ``manage.py resonate ARGV`` can take the thin path: it names --server and none
    of Django's own options."""
    names = {a.split("=", 1)[0] for a in argv if a.startswith("-")}
    return "--server" in names and not names.intersection(DJANGO_OPTIONS)


def main_remote(argv: list[str]) -> int | None:
    """``manage.py resonate ARGV --server URL`` without Django: the same parser and commands,
    the requests sent to the server. None when ARGV holds anything this parser does not know
    (Django's own options, --server on a local-only command): manage.py then runs the command
    through Django as usual, which answers those."""
    parser = argparse.ArgumentParser(prog="manage.py resonate", description=__doc__)
    add_arguments(parser)
    try:
        options, unknown = parser.parse_known_args(argv)
    except SystemExit as exit:  # -h, or a usage error: argparse has said so
        return int(exit.code or 0)
    if unknown or not options.server:
        return None
    with quiet_pipe():
        try:
            run(vars(options), lambda line: sys.stdout.write(f"{line}\n"))
        except CliError as exc:
            sys.stderr.write(f"CommandError: {exc}\n")  # as Django prints a command's error
            return 1
    return 0


@contextlib.contextmanager
def quiet_pipe() -> Iterator[None]:
    """Stop quietly when stdout's reader goes away (``resonate ... | head -1``): no
    BrokenPipeError traceback, now or when the interpreter flushes stdout at exit, and the exit
    status of a process ended by SIGPIPE (128 + 13), as ``yes | head`` leaves."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        # Whatever is still buffered can go nowhere: point stdout at /dev/null for the exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)


__all__ = [
    "CliError",
    "add_arguments",
    "duration",
    "key_value",
    "local",
    "main_remote",
    "quiet_pipe",
    "remote",
    "run",
    "wants_server",
]
