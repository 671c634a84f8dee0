"""Every migration added since the previous release (tests/support/release.py) can run while
that release serves (docs/how-to/upgrading.md), as django-migration-linter judges it on
PostgreSQL: no column that release's inserts would leave NULL against a NOT NULL, no dropped or
renamed column or table it still reads, no index built under a lock that stops writes
(resonate_project.schema's AddIndexOnline builds them CONCURRENTLY), and, as its warnings are
errors here, nothing it warns about. The migrations of earlier releases are history and are not
judged again.

On PostgreSQL only: SQLite rebuilds a table to alter a column, which the linter reads as a new
NOT NULL table, and an embedded SQLite server is upgraded by stopping it.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any

import pytest
from django_migration_linter import MigrationLinter

from tests.support.release import PREVIOUS, git_at_previous

APPS = {
    "promises": "promises/migrations",
    "tasks_app": "tasks_app/migrations",
    "schedules": "schedules/migrations",
    "outbox": "outbox/migrations",
    "access": "resonate_project/access/migrations",
}

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]


def released() -> set[tuple[str, str]]:
    """(app, migration) pairs the previous release shipped."""
    found: set[tuple[str, str]] = set()
    for app, folder in APPS.items():
        listing = git_at_previous("ls-tree", "--name-only", PREVIOUS, f"{folder}/")
        for line in listing.splitlines():
            name = Path(line).stem
            if re.match(r"\d{4}_", name):
                found.add((app, name))
    return found


def lint(**options: Any) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        linter = MigrationLinter(
            no_cache=True, include_apps=list(APPS), all_warnings_as_errors=True, **options
        )
        linter.lint_all_migrations()
    return out.getvalue()


def verdicts(text: str) -> dict[tuple[str, str], str]:
    return {
        (app, name): verdict
        for app, name, verdict in re.findall(r"^\((\w+), (\w+)\)\.\.\. (\w+)", text, re.M)
    }


def test_every_migration_since_the_previous_release_can_run_while_it_serves() -> None:
    shipped = released()
    text = lint(ignore_name=[name for _, name in shipped], ignore_initial_migrations=True)
    judged = {key: v for key, v in verdicts(text).items() if v != "IGNORE"}
    assert judged, text  # the linter looked at something
    refused = {key: v for key, v in judged.items() if v != "OK"}
    assert not refused, text


def test_the_linter_refuses_what_the_previous_release_could_not_run_beside() -> None:
    """The check itself: a landed migration that built an index under a lock is refused when it
    is judged (outbox 0004 did, before AddIndexOnline)."""
    text = lint(include_name=["0004_message_poll_route"])
    assert verdicts(text)[("outbox", "0004_message_poll_route")] == "ERR", text
