"""``python manage.py resonate`` as a shell runs it (issue #25, part 6): a fresh process per call.

With ``--server`` the call takes the thin path (no Django set up: it works without the server's
settings) and answers as the Django command does; any of Django's own options sends it through
Django instead. ``… | head -1`` ends quietly, locally and with ``--server``: no BrokenPipeError
traceback, and exit status 0 or the SIGPIPE convention (141). CPU per call is measured by
bench/cli_cpu.py, not asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from promises import services

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# More output than a pipe holds (64 KiB), so the writer is still writing when the reader goes.
MANY = 600
LONG = "x" * 60

pytestmark = pytest.mark.django_db(transaction=True)


def manage(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "manage.py", *args],
        cwd=ROOT,
        env=env or dict(os.environ),
        capture_output=True,
        text=True,
        timeout=120,
    )


def head_1(argv: list[str], env: dict[str, str]) -> tuple[str, int, str]:
    """``argv | head -1``: the first line, the command's exit status and its stderr."""
    proc = subprocess.Popen(
        [PYTHON, "manage.py", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as head does after its line
    err = proc.stderr.read()
    return first, proc.wait(timeout=120), err


def many_promises(now: int = 1_000) -> None:
    for i in range(MANY):
        services.promise_create(
            id=f"bulk-{i:04d}-{LONG}", timeout_at=10**13, param=None, tags={"k": LONG}, now=now
        )


def test_a_server_call_needs_no_settings_and_answers_as_the_django_command(
    live_server: Any,
) -> None:
    server = ["--server", live_server.url]
    created = manage("resonate", "promises", "create", "cli-1", "--timeout", "1h", *server)
    assert created.returncode == 0, created.stderr
    # Without the server's settings (a workstation with only the CLI): the thin path needs none.
    no_settings = {**os.environ, "DJANGO_SETTINGS_MODULE": "no.such.settings"}
    thin = manage("resonate", "promises", "get", "cli-1", "--json", *server, env=no_settings)
    assert thin.returncode == 0, thin.stderr
    # Django's own option (--traceback) sends the same call through Django: the same answer.
    django = manage("resonate", "--traceback", "promises", "get", "cli-1", "--json", *server)
    assert django.returncode == 0, django.stderr
    assert json.loads(thin.stdout) == json.loads(django.stdout)
    assert json.loads(thin.stdout)["promise"]["id"] == "cli-1"


def test_a_refused_server_call_is_a_command_error(live_server: Any) -> None:
    server = ["--server", live_server.url]
    thin = manage("resonate", "promises", "get", "nope", *server)
    django = manage("resonate", "--traceback", "promises", "get", "nope", *server)
    assert thin.returncode == django.returncode == 1
    assert thin.stderr == "CommandError: promise.get: 404 promise not found\n"
    assert thin.stdout == ""
    assert "promise.get: 404 promise not found" in django.stderr


def test_a_usage_mistake_on_the_thin_path_is_argparses_error(live_server: Any) -> None:
    wrong = manage("resonate", "promises", "search", "--state", "nope", "--server", live_server.url)
    assert wrong.returncode == 2
    assert "invalid choice: 'nope'" in wrong.stderr


def test_a_server_call_piped_into_head_ends_quietly(live_server: Any) -> None:
    many_promises()
    argv = ["resonate", "promises", "search", "--limit", "1000", "--server", live_server.url]
    first, status, err = head_1(argv, dict(os.environ))
    assert first.split() == ["ID", "STATE", "CREATED", "TIMEOUT", "SETTLED"]
    assert status in (0, 141), err
    assert err == ""


def test_a_local_call_piped_into_head_ends_quietly(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'cli.sqlite3'}"}
    assert manage("migrate", "-v0", env=env).returncode == 0
    seed = (
        "from promises import services\n"
        f"for i in range({MANY}):\n"
        f"    services.promise_create(id=f'bulk-{{i:04d}}-{LONG}', timeout_at=10**13,"
        f" param=None, tags={{'k': '{LONG}'}}, now=1000)\n"
    )
    seeded = manage("shell", "-c", seed, env=env)
    assert seeded.returncode == 0, seeded.stderr
    for argv in (
        ["promises", "search", "--limit", "1000"],
        ["promises", "search", "--limit", "1000", "--json"],
    ):
        first, status, err = head_1(["resonate", *argv], env)
        assert first.strip() in ("ID   STATE", "{") or first.startswith("ID "), first
        assert status in (0, 141), err
        assert "Traceback" not in err, err
        assert "BrokenPipeError" not in err, err
