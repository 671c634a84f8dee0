"""The argument parser of ``manage.py resonate``: every subcommand, its options, and the
function it runs."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from resonate_project.core.protocol import PROMISE_STATES, TASK_STATES
from resonate_project.edges.cli.commands import (
    invoke,
    promise_create,
    promise_get,
    promise_search,
    promise_settle,
    schedule_create,
    schedule_delete,
    schedule_get,
    schedule_search,
    task_continue,
    task_get,
    task_halt,
    task_search,
    tree,
)
from resonate_project.edges.cli.operators import (
    credentials_create,
    credentials_list,
    credentials_revoke,
    prune,
    worker,
)
from resonate_project.edges.cli.transport import (
    DEFAULT_TARGET,
    SETTLE_STATES,
)

# --- arguments ----------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration(text: str) -> int:
    """``1h``, ``30m``, ``10s``, ``500ms``, ``2d``, or a sum such as ``1h30m``; in ms."""
    if not re.fullmatch(r"(?:\d+(?:ms|s|m|h|d))+", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 1h, 30m, 10s, 500ms")
    return sum(int(n) * _UNIT_MS[unit] for n, unit in _DURATION.findall(text))


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", metavar="URL", help="a running server (default: local DB)")
    common.add_argument("--token", help="bearer token sent to --server")
    common.add_argument("--json", action="store_true", help="print the protocol's data as JSON")

    def command(group: Any, name: str, run: Callable[..., None], help: str) -> Any:
        sub = group.add_parser(name, parents=[common], help=help, description=help)
        sub.set_defaults(run=run)
        return sub

    def value_options(sub: Any, prefix: str = "") -> None:
        sub.add_argument(f"--{prefix}data", help="value data (text, sent base64-encoded)")
        pairs(sub, f"--{prefix}header", "a value header (repeatable)")

    def pairs(sub: Any, flag: str, help: str) -> None:
        """A repeatable ``K=V`` option (tags, headers)."""
        sub.add_argument(
            flag, type=key_value, action="append", default=[], metavar="K=V", help=help
        )

    def page_options(sub: Any) -> None:
        sub.add_argument("--limit", type=int, help="results per page (default 100)")
        sub.add_argument("--cursor", help="continue after this id (printed by the last page)")

    groups = parser.add_subparsers(dest="group", required=True)

    promises = groups.add_parser("promises", help="durable promises").add_subparsers(
        dest="action", required=True
    )
    command(promises, "get", promise_get, "show a promise").add_argument("id")
    sub = command(promises, "create", promise_create, "create a promise (idempotent by id)")
    sub.add_argument("id")
    sub.add_argument("--timeout", type=duration, required=True, help="e.g. 1h, 30m, 10s")
    value_options(sub)
    pairs(sub, "--tag", "a tag, e.g. resonate:target=poll://any@default (repeatable)")
    for name, state in SETTLE_STATES.items():
        sub = command(promises, name, promise_settle, f"settle a promise as {state}")
        sub.add_argument("id")
        value_options(sub)
        sub.set_defaults(state=state)
    sub = command(promises, "search", promise_search, "list promises by state and tags")
    sub.add_argument("--state", choices=PROMISE_STATES)
    pairs(sub, "--tag", "only promises with this tag (repeatable: all of them)")
    page_options(sub)

    tasks = groups.add_parser("tasks", help="tasks").add_subparsers(dest="action", required=True)
    command(tasks, "get", task_get, "show a task").add_argument("id")
    sub = command(tasks, "search", task_search, "list tasks by state")
    sub.add_argument("--state", choices=TASK_STATES)
    page_options(sub)
    command(tasks, "halt", task_halt, "take a task out of circulation").add_argument("id")
    command(tasks, "continue", task_continue, "put a halted task back").add_argument("id")

    schedules = groups.add_parser("schedules", help="schedules").add_subparsers(
        dest="action", required=True
    )
    command(schedules, "get", schedule_get, "show a schedule").add_argument("id")
    sub = command(schedules, "create", schedule_create, "create a schedule (idempotent by id)")
    sub.add_argument("id")
    sub.add_argument("--cron", required=True, help="5 fields, or 6 with seconds first; UTC")
    sub.add_argument(
        "--promise-id", required=True, help="occurrence id template: {{.id}}, {{.timestamp}}"
    )
    sub.add_argument("--promise-timeout", type=duration, required=True, help="e.g. 1h")
    value_options(sub, prefix="promise-")
    pairs(sub, "--promise-tag", "a tag of every occurrence promise (repeatable)")
    command(schedules, "delete", schedule_delete, "delete a schedule").add_argument("id")
    sub = command(schedules, "search", schedule_search, "list schedules by promise tags")
    pairs(sub, "--tag", "only schedules whose promises carry this tag (repeatable)")
    page_options(sub)

    sub = command(groups, "invoke", invoke, "start a function run: a promise with a target")
    sub.add_argument("id")
    sub.add_argument("--func", required=True, help="the registered function's name")
    sub.add_argument(
        "--arg", action="append", default=[], help="an argument (JSON if it parses, else text)"
    )
    sub.add_argument("--json-args", metavar="JSON", help="all arguments as one JSON array")
    sub.add_argument("--version", type=int, default=1, help="function version (default 1)")
    sub.add_argument("--timeout", type=duration, default=duration("1h"), help="default 1h")
    sub.add_argument("--target", default=DEFAULT_TARGET, help=f"default {DEFAULT_TARGET}")
    sub.add_argument("--delay", type=duration, help="dispatch no sooner than this from now")

    command(
        groups, "tree", tree, "the call tree under a promise (by resonate:parent)"
    ).add_argument("id")

    creds = groups.add_parser(
        "credentials", help="service credentials (local database only)"
    ).add_subparsers(dest="action", required=True)
    help = "create a credential; its token is printed once, alone on the last line"
    sub = creds.add_parser("create", help=help, description=help)
    sub.add_argument("name")
    sub.add_argument("--prefix", default="", help="every id it names must start with this")
    sub.add_argument(
        "--group",
        action="append",
        default=[],
        help="a poll group it may stream (repeatable; none: any group)",
    )
    sub.add_argument(
        "--push-host",
        action="append",
        default=[],
        help="a host (or *.domain) its http(s) addresses may name (repeatable; none: any host, "
        "or none at all with --group)",
    )
    sub.add_argument("--admin", action="store_true", help="may do anything, debug included")
    sub.set_defaults(run=credentials_create)
    help = "revoke a credential (requests with it answer 401 from now on)"
    sub = creds.add_parser("revoke", help=help, description=help)
    sub.add_argument("name")
    sub.set_defaults(run=credentials_revoke)
    help = "list credentials (never their tokens)"
    creds.add_parser("list", help=help, description=help).set_defaults(run=credentials_list)

    help = "run calls enqueued through the Django Tasks backend (until SIGTERM)"
    sub = groups.add_parser("worker", help=help, description=help)
    sub.add_argument(
        "--queue",
        action="append",
        default=[],
        help="a queue to serve (repeatable; default: the backend's QUEUES, else default)",
    )
    sub.add_argument("--concurrency", type=int, default=1, help="calls run at once (threads)")
    sub.add_argument("--backend", default="default", help="the TASKS alias (default: default)")
    sub.add_argument(
        "--grace", type=float, default=30.0, help="seconds running calls get after SIGTERM"
    )
    sub.set_defaults(run=worker)

    help = "delete settled work older than the retention window (local database only)"
    sub = groups.add_parser("prune", help=help, description=help)
    sub.add_argument(
        "--older-than",
        type=duration,
        help="keep settled trees this long, e.g. 30d (default: the RETENTION_MS setting)",
    )
    sub.add_argument(
        "--django-tasks-older-than",
        type=duration,
        help="the same for trees holding a Django task (default: RETENTION_DJANGO_TASKS_MS)",
    )
    sub.add_argument(
        "--dead-letters-older-than",
        type=duration,
        help="the same for dead-lettered and undeliverable messages "
        "(default: RETENTION_DEAD_LETTERS_MS)",
    )
    sub.add_argument(
        "--dry-run", action="store_true", help="count what would be deleted; delete nothing"
    )
    sub.add_argument(
        "--pace",
        type=float,
        default=1.0,
        help="after each pass wait this many times as long as it took (default 1: prune half "
        "the time, so requests keep the database; 0: as fast as it can)",
    )
    sub.add_argument("--json", action="store_true", help="print the counts as JSON")
    sub.set_defaults(run=prune)
