"""The command lines of the how-to guides that work on the local database, run exactly as the
pages show them (``python`` is this virtualenv's, as after ``source .venv/bin/activate``), each
test on a fresh SQLite file database."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.docs_blocks import ROOT, block

AUTH = "docs/how-to/auth.md"


@dataclass
class Shell:
    """One documented line at a time in a shell at the checkout, on a fresh database."""

    env: dict[str, str]

    def __call__(self, line: str) -> str:
        done = subprocess.run(
            line, shell=True, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        return done.stdout


def reader_env(database: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "DJANGO_", "PYTEST_", "CELERY_")) and k != "DATABASE_URL"
    }
    env["DATABASE_URL"] = f"sqlite:///{database}"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.fixture(scope="module")
def migrated_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One database migrated once, copied for each test that starts from a migrated one."""
    database = tmp_path_factory.mktemp("docs") / "migrated.sqlite3"
    Shell(reader_env(database))("python manage.py migrate --noinput -v 0")
    return database


@pytest.fixture
def shell(tmp_path: Path) -> Shell:
    return Shell(reader_env(tmp_path / "docs.sqlite3"))


@pytest.fixture
def migrated(tmp_path: Path, migrated_file: Path) -> Shell:
    database = tmp_path / "docs.sqlite3"
    shutil.copyfile(migrated_file, database)
    return Shell(reader_env(database))


def test_the_credentials_commands_work_as_written(migrated: Shell) -> None:
    run = migrated
    create, listing, revoke = block(AUTH, "auth-credentials").lines()
    token = run(create).splitlines()[-1]
    assert token.startswith("rsn_")
    listed = run(listing)
    assert "billing-worker" in listed
    assert "billing/" in listed
    assert token not in listed
    assert "revoked credential billing-worker" in run(revoke)
    assert "revoked" in run(listing)


def test_the_tenant_commands_create_a_tenant_and_an_operator(migrated: Shell) -> None:
    run = migrated
    tenant, operator = block(AUTH, "auth-tenants").lines()
    assert run(tenant).splitlines()[-1].startswith("rsn_")
    assert run(operator).splitlines()[-1].startswith("rsn_")
    listed = run("python manage.py resonate credentials list")
    assert "shipping/" in listed
    assert "ops" in listed


def test_the_scraper_credential_is_created_as_written(migrated: Shell) -> None:
    run = migrated
    (line,) = block("docs/how-to/observability.md", "observability-scraper").lines()
    assert run(line).splitlines()[-1].startswith("rsn_")
    assert "prometheus" in run("python manage.py resonate credentials list")


def test_the_operating_cli_examples_run_as_written(migrated: Shell) -> None:
    run = migrated
    lines = block("docs/how-to/operating.md", "operating-cli").lines()
    *once, worker = lines
    outputs = [run(line) for line in once]
    assert "p1" in outputs[0]
    assert "resolved" in outputs[1]
    assert "nightly" in outputs[3]
    assert '"id": "job-1"' in outputs[5] or '"job-1"' in outputs[5]
    assert outputs[6].startswith("job-1")
    # The worker serves until SIGTERM: it starts, says so, and stops when told.
    assert worker.startswith("python manage.py resonate worker ")
    proc = subprocess.Popen(
        worker,
        shell=True,
        cwd=ROOT,
        env=run.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("worker "), first
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(60)


def test_the_troubleshooting_commands_show_a_stuck_run(migrated: Shell) -> None:
    run = migrated
    # A run nobody serves: its task waits for a worker of the group "billing".
    run("python manage.py resonate invoke order-7 --func charge --target poll://any@billing")
    tree, task, pending = block("docs/how-to/troubleshooting.md", "troubleshooting-inspect").lines()
    assert run(tree).startswith("order-7 [pending]")
    shown = run(task)
    assert "pending" in shown
    assert "order-7" in run(pending)


def test_the_upgrade_commands_plan_apply_and_check(shell: Shell) -> None:
    plan, apply, check = block("docs/how-to/upgrading.md", "upgrading-migrate").lines()
    assert "promises.0001_initial" in shell(plan)
    shell(apply)
    assert "No planned migration operations" in shell(plan)
    assert "no issues" in shell(check)


def test_collectstatic_gathers_the_admin_files(shell: Shell, tmp_path: Path) -> None:
    (line,) = block("docs/how-to/production.md", "production-static").lines()
    shell.env["DJANGO_STATIC_ROOT"] = str(tmp_path / "static")
    out = shell(line)
    assert "static files copied" in out, out
    assert (tmp_path / "static" / "admin" / "css" / "base.css").is_file()


def test_the_version_line_names_the_release(shell: Shell) -> None:
    from resonate_project import __version__

    (line,) = block("docs/how-to/upgrading.md", "upgrading-version").lines()
    assert shell(line).startswith(f"django-resonate {__version__} (Django ")
