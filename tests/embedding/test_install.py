"""The embedding guide's install (docs/how-to/embedding.md), everywhere it is claimed
(``make test-install``, not ``make test``): each Python the guide supports that is here (3.12,
3.13; missing: a failure under CI=true), each with the pip its ``python -m venv`` bundles
(3.12.1: pip 23.2.1), nothing upgraded and nothing installed but the guide's lines.

* Django 6.0 and 6.1: a site that has the version (``pip install "django==6.x.*"`` first, as an
  existing site would) runs the guide's apps line, which keeps it; on SQLite without psycopg,
  then with the guide's PostgreSQL line on PostgreSQL: migrate, a clean ``check``, the steps'
  reads on their indexes, and under the guide's uvicorn line a timer fires, the SDK's sleep
  workflow completes and the host logs no error while the steps run.
* The extras resolve with that pip: ``[server]`` and ``[celery]`` (``pip install --dry-run``).
* The same lines with uv (``uv pip install``, as ``make setup`` installs; the newest Python and
  Django here): a host on SQLite runs the steps, and both extras resolve.
* Across versions, on SQLite (which keeps the index text the migrating Django wrote): a database
  migrated under 6.0 served under 6.1, and one migrated under 6.1 served under 6.0 after the
  guide's ``[celery]`` line took Django back to 6.0 (the path its "With Celery" leads a user
  down), with the steps running in-process there; no error, and the reads on their indexes."""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.embedding.host import (
    GIT_URL,
    Host,
    PipLines,
    build_wheel,
    find_python,
    manage,
    new_host,
    new_site,
    pg_database,
    plans_in,
    sdk_python,
    serve_and_run_the_steps,
    unavailable,
)
from tests.embedding.plans import plan_problems

PYTHONS = ["3.12", "3.13"]
DJANGOS = ["6.0", "6.1"]
UV = Path(sys.executable).with_name("uv")  # the one `make setup` installs


@dataclass
class UvHost(Host):
    """The same virtualenv, the guide's lines given to ``uv pip install`` instead of pip."""

    def pip(self, *argv: str) -> None:
        assert argv[0] == "install", argv
        args = [a.replace(GIT_URL, self.wheel.as_uri()) for a in argv[1:]]
        res = subprocess.run(
            [str(UV), "pip", "install", "-p", str(self.bin / "python"), *args],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if res.returncode != 0:
            out = res.stdout[-2000:] + res.stderr[-2000:]
            if "unsatisfiable" in out or "No solution found" in out:
                pytest.fail(f"uv pip {shlex.join(argv)}: the pins do not resolve:\n{out}")
            unavailable(f"uv pip {shlex.join(argv)} could not install:\n{out}")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def host_on(python: str, tmp: Path, wheel: Path) -> Host:
    found = find_python(python)
    if found is None:
        unavailable(f"no Python {python} (python{python} on PATH or under /root/.pyenv/versions)")
    assert found is not None
    return new_host(tmp, found, wheel)


def a_site_runs_the_steps(host: Host, name: str, databases: str = "") -> Path:
    site = new_site(host, name, settings=databases)
    manage(host, site, "migrate", "-v", "0")
    assert "no issues" in manage(host, site, "check")
    if not databases:
        assert plan_problems(plans_in(host, site)) == []
    serve_and_run_the_steps(host, site, sdk_python())
    return site


@pytest.mark.parametrize("django", DJANGOS)
@pytest.mark.parametrize("python", PYTHONS)
def test_the_readme_lines_install_a_host(
    python: str, django: str, wheel: Path, tmp_path: Path
) -> None:
    pip = PipLines.from_readme()
    host = host_on(python, tmp_path, wheel)
    host.pip("install", f"django=={django}.*")
    host.pip("install", *pip.apps)
    assert host.django().startswith(f"{django}."), host.django()  # the site's Django kept
    assert not host.has("psycopg")
    a_site_runs_the_steps(host, "site-sqlite")

    host.pip("install", *pip.postgresql)
    with pg_database("resonate_install") as databases:
        a_site_runs_the_steps(host, "site-postgresql", databases)


@pytest.mark.parametrize("python", PYTHONS)
def test_the_extras_resolve_with_the_bundled_pip(python: str, wheel: Path, tmp_path: Path) -> None:
    host = host_on(python, tmp_path, wheel)
    for extra in ("server", "celery"):
        host.pip("install", "--dry-run", f"django-resonate[{extra}] @ {wheel.as_uri()}")


def test_a_database_migrated_under_one_django_is_served_under_the_other(
    wheel: Path, tmp_path: Path
) -> None:
    pip = PipLines.from_readme()
    host = host_on("3.12", tmp_path, wheel)
    host.pip("install", "django==6.0.*")
    host.pip("install", *pip.apps)
    early = new_site(host, "site-migrated-under-6.0")
    manage(host, early, "migrate", "-v", "0")

    host.pip("install", "django==6.1.*")
    assert host.django().startswith("6.1."), host.django()
    assert plan_problems(plans_in(host, early)) == []
    serve_and_run_the_steps(host, early, sdk_python())
    late = new_site(host, "site-migrated-under-6.1")
    manage(host, late, "migrate", "-v", "0")

    host.pip("install", *pip.celery)
    assert host.django().startswith("6.0."), host.django()  # django-celery-beat: Django<6.1
    assert plan_problems(plans_in(host, late)) == []
    serve_and_run_the_steps(host, late, sdk_python())


def test_the_readme_lines_install_a_host_with_uv(wheel: Path, tmp_path: Path) -> None:
    pip = PipLines.from_readme()
    plain = host_on(PYTHONS[-1], tmp_path, wheel)
    host = UvHost(plain.root, plain.wheel, plain.python)
    host.pip("install", f"django=={DJANGOS[-1]}.*")
    host.pip("install", *pip.apps)
    assert host.django().startswith(f"{DJANGOS[-1]}."), host.django()
    assert not host.has("psycopg")
    a_site_runs_the_steps(host, "site-uv")
    for extra in ("server", "celery"):
        host.pip("install", "--dry-run", f"django-resonate[{extra}] @ {wheel.as_uri()}")
