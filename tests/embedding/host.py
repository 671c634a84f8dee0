"""A host site as a new user makes one from the embedding guide (docs/how-to/embedding.md), for
tests/embedding: the guide's ``pip`` lines run as written (the git URL replaced by the built
wheel) in a virtualenv made by ``python -m venv`` with the pip that interpreter bundles,
``django-admin startproject mysite``,
the guide's blocks appended as they stand, its commands run, and the host's own log read for
errors while the steps run. The SDK runs from its own virtualenv (tests/e2e/tools.py), so the
host holds exactly what the guide installs.

Needs PyPI or a pip cache, and PostgreSQL and Redis where a test says so; without one a test
fails under CI=true and is skipped, with the reason, otherwise."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e import tools
from tests.support import docs_blocks

ROOT = Path(__file__).resolve().parents[2]
CI = os.environ.get("CI") == "true"
GIT_URL = "git+https://github.com/<you>/django-resonate"
PLANS = Path(__file__).with_name("plans.py")


def unavailable(reason: str) -> None:
    """A missing dependency: a failure under CI=true, else a skip."""
    if CI:
        pytest.fail(reason)
    pytest.skip(reason)


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    res = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, f"{args}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


EMBEDDING = "docs/how-to/embedding.md"  # the guide a host follows; its blocks are read by name


def guide_block(name: str) -> docs_blocks.Block:
    return docs_blocks.block(EMBEDDING, name)


def file_blocks(*names: str) -> dict[str, str]:
    """The guide's ``# <what> mysite/<file>`` blocks ``names``, by file, without that line."""
    found: dict[str, str] = {}
    for name in names:
        head, _, code = guide_block(name).text.partition("\n")
        file = re.fullmatch(r"# .*mysite/(\S+)", head)
        assert file, f"{EMBEDDING} block {name!r} does not start with '# ... mysite/<file>'"
        found[file.group(1)] = code
    return found


def readme_blocks(tag: str = "") -> dict[str, str]:
    """The guide's settings, URLs and ASGI blocks by file (``tag="optional: "``: the overview)."""
    if tag == "optional: ":
        return file_blocks("embedding-overview")
    assert tag == "", tag
    return file_blocks("embedding-settings", "embedding-urls", "embedding-asgi")


@dataclass(frozen=True)
class PipLines:
    """The embedding guide's ``pip install`` lines, each as argv after ``pip``."""

    apps: list[str]  # the apps and uvicorn
    postgresql: list[str]  # "on PostgreSQL only"
    celery: list[str]  # the [celery] extra

    @classmethod
    def from_readme(cls) -> PipLines:
        lines = [
            line
            for name in ("embedding-install", "embedding-celery-install")
            for line in guide_block(name).text.splitlines()
            if line.startswith("pip install ")
        ]
        assert len(lines) == 3, lines
        apps, postgresql, celery = (shlex.split(line, comments=True)[1:] for line in lines)
        assert GIT_URL in " ".join(apps), apps
        assert "uvicorn" in apps, apps
        assert any(a.startswith("psycopg") for a in postgresql), lines[1]
        assert "PostgreSQL" in lines[1], lines[1]
        assert any(a.startswith("django-resonate[celery] @") for a in celery), celery
        return cls(apps, postgresql, celery)


def build_wheel(tmp: Path) -> Path:
    """The project's wheel, built from a copy of the working tree (setuptools leaves build/
    beside the sources)."""
    skip = (".*", "build", "*.egg-info", "node_modules", "__pycache__", "*.sqlite3*", "bench")
    shutil.copytree(ROOT, tmp / "src", ignore=shutil.ignore_patterns(*skip))
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        tmp / "dist",
        tmp / "src",
        cwd=tmp,
    )
    return next((tmp / "dist").glob("django_resonate-*.whl"))


@dataclass
class Host:
    """A virtualenv (``venv``) made by ``python -m venv`` from ``python``, and its sites."""

    root: Path
    wheel: Path
    python: str

    @property
    def bin(self) -> Path:
        return self.root / "venv/bin"

    def pip(self, *argv: str) -> None:
        """``pip install …`` with the venv's own pip, the guide's git URL as the wheel."""
        args = [a.replace(GIT_URL, self.wheel.as_uri()) for a in argv]
        res = subprocess.run(
            [str(self.bin / "pip"), *args], capture_output=True, text=True, timeout=900
        )
        if res.returncode != 0:
            out = res.stdout[-2000:] + res.stderr[-2000:]
            if "ResolutionImpossible" in out or "conflicting dependencies" in out:
                pytest.fail(f"pip {shlex.join(argv)}: the pins do not resolve:\n{out}")
            unavailable(f"pip {shlex.join(argv)} could not install:\n{out}")

    def django(self) -> str:
        return run(
            self.bin / "python", "-c", "import django; print(django.__version__)", cwd=self.root
        ).strip()

    def has(self, module: str) -> bool:
        probe = (
            f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
        )
        return subprocess.run([self.bin / "python", "-c", probe], timeout=60).returncode == 0


def new_host(tmp: Path, python: str, wheel: Path | None = None) -> Host:
    """A fresh virtualenv from ``python``; its pip is the one ``python -m venv`` installs."""
    host = Host(tmp, wheel or build_wheel(tmp), python)
    run(python, "-m", "venv", tmp / "venv", cwd=tmp)
    return host


def site_env(host: Host) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mysite.settings", "PYTHONPATH": ""}
    for name in ("DATABASE_URL", "RESONATE_WEB_THREADS", "CELERY_BROKER_URL", "REDIS_URL"):
        env.pop(name, None)
    env["PATH"] = f"{host.bin}{os.pathsep}{env['PATH']}"
    return env


def new_site(host: Host, name: str, settings: str = "") -> Path:
    """``django-admin startproject mysite`` with the embedding guide's three blocks and its
    optional overview block appended, then ``settings`` (the test's own DATABASES, say)."""
    site = host.root / name
    site.mkdir()
    run(host.bin / "django-admin", "startproject", "mysite", site, cwd=host.root)
    blocks = readme_blocks()
    assert set(blocks) == {"settings.py", "urls.py", "asgi.py"}
    added = sum(1 for code in blocks.values() for line in code.splitlines() if line.strip())
    assert added <= 10, f"the embedding guide asks a host for {added} lines"
    optional = readme_blocks("optional: ")
    assert set(optional) == {"urls.py"}
    for file, code in [*blocks.items(), *optional.items()]:
        with (site / "mysite" / file).open("a") as f:
            f.write("\n" + code)
    with (site / "mysite/settings.py").open("a") as f:
        f.write(settings)
    return site


def manage(host: Host, site: Path, *args: str) -> str:
    return run(host.bin / "python", "manage.py", *args, cwd=site, env=site_env(host))


def plans_in(host: Host, site: Path) -> dict[str, list[str]]:
    """tests/embedding/plans.py's ``read_plans`` inside the site."""
    code = PLANS.read_text() + "\nimport json\nprint('RESULT ' + json.dumps(read_plans()))\n"
    return json.loads(manage(host, site, "shell", "-c", code).split("RESULT ", 1)[1])


# --- serving -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.2)


# An error in a host's log: logging's ERROR level (uvicorn's "ERROR:", Celery's "ERROR/"), a
# traceback, or an exception's name and message (logging's last-resort handler prints just
# those: a startproject site configures no handler for the apps' loggers).
ERROR_LINE = re.compile(r"\bERROR\b|\bCRITICAL\b|Traceback \(most recent|\b\w+(Error|Exception): ")


def errors_in(log: Path) -> list[str]:
    return [
        line for line in log.read_text(errors="replace").splitlines() if ERROR_LINE.search(line)
    ]


def serve_command(port: int) -> list[str]:
    """The embedding guide's uvicorn line, on ``port``."""
    found = re.search(
        r"^uvicorn mysite\.asgi:application --port \d+", guide_block("embedding-serve").text, re.M
    )
    assert found, f"{EMBEDDING} embedding-serve shows no uvicorn line"
    argv = shlex.split(found.group(0))
    argv[argv.index("--port") + 1] = str(port)
    return argv


@contextlib.contextmanager
def processes(
    host: Host, site: Path, commands: list[list[str]], logs: list[Path]
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``commands`` running in ``site``, each writing to its log; terminated afterwards."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for argv, log in zip(commands, logs, strict=True):
            procs.append(
                subprocess.Popen(
                    argv,
                    cwd=site,
                    env=site_env(host),
                    stdout=log.open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def envelope(port: int, kind: str, **data: object) -> dict[str, object]:
    body = json.dumps({"kind": kind, "head": {"corrId": "t"}, "data": data}).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/resonate/",
        body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return json.loads(res.read())
    except urllib.error.HTTPError as err:
        raise AssertionError(f"{kind}: {err.code} {err.read()!r}") from err


# The README's SDK quickstart workflow: a durable step and a durable sleep, which hangs
# unless something runs the timers.
SLEEP_WORKFLOW = """
import asyncio, sys
from datetime import timedelta
from resonate.resonate import Resonate


def greet(ctx, name):
    return f"hello {name}"


async def hello(ctx, name):
    greeting = await ctx.run(greet, name)
    await ctx.sleep(timedelta(seconds=1))
    return greeting.upper()


async def main():
    resonate = Resonate(url=sys.argv[1])
    resonate.register(hello)
    print("RESULT", await resonate.run(sys.argv[2], hello, "world").result(), flush=True)
    await resonate.stop()


asyncio.run(main())
"""


def sdk_python() -> Path:
    try:
        return tools.python_sdk().python
    except tools.Missing as exc:
        unavailable(str(exc))
        raise


def a_timer_fires_and_the_sdk_sleeps(port: int, site: Path, sdk: Path) -> None:
    """A ``resonate:timer`` promise reads resolved after its deadline, and the SDK's sleep
    workflow (a durable step, then ``ctx.sleep``) completes against ``/resonate``: only a step
    runner resumes the suspended task when the sleep's timer is due (a read alone would not)."""
    now = int(time.time() * 1000)
    timer = f"timer/{now}"
    reply = envelope(
        port,
        "promise.create",
        id=timer,
        timeoutAt=now + 1500,
        param={},
        tags={"resonate:timer": "true"},
    )
    assert reply["head"]["status"] == 200, reply  # type: ignore[index]
    deadline = time.monotonic() + 15
    while True:
        got = envelope(port, "promise.get", id=timer)
        state = got["data"]["promise"]["state"]  # type: ignore[index]
        if state != "pending":
            break
        assert time.monotonic() < deadline, "the timer never fired"
        time.sleep(0.5)
    assert state == "resolved"  # a timer resolves at its deadline

    (site / "sleep_workflow.py").write_text(SLEEP_WORKFLOW)
    url = f"http://127.0.0.1:{port}/resonate"
    done = subprocess.run(
        [sdk, "sleep_workflow.py", url, f"hello-{now}"],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "RESULT HELLO WORLD" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]


# How long a served host runs its steps, at least, before its log is read.
STEPS_FOR_S = 4.0


def serve_and_run_the_steps(host: Host, site: Path, sdk: Path) -> None:
    """The guide's uvicorn line, as written: a timer fires and the SDK's sleep workflow completes,
    the steps run for ``STEPS_FOR_S`` at least, and the host's log holds no error."""
    port = free_port()
    log = site / f"uvicorn-{host.django()}.log"
    started = time.monotonic()
    with processes(host, site, [serve_command(port)], [log]) as (server,):
        wait_for_port(port, server, log, "uvicorn")
        a_timer_fires_and_the_sdk_sleeps(port, site, sdk)
        time.sleep(max(0.0, STEPS_FOR_S - (time.monotonic() - started)))
        assert server.poll() is None, log.read_text()[-3000:]
    assert errors_in(log) == [], log.read_text()[-4000:]


# --- databases -----------------------------------------------------------------------------------

PG_SERVER = os.environ.get("DATABASE_URL_PG", "postgresql://postgres@127.0.0.1:5432/resonate")


@contextlib.contextmanager
def pg_database(prefix: str) -> Iterator[str]:
    """A fresh database on the test server, dropped afterwards: the host's DATABASES line."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    info = conninfo_to_dict(PG_SERVER)
    name = f"{prefix}_{os.getpid()}_{time.monotonic_ns()}"
    try:
        admin = psycopg.connect(make_conninfo(PG_SERVER, dbname="postgres"), autocommit=True)
    except psycopg.OperationalError as exc:
        unavailable(f"PostgreSQL unreachable at {PG_SERVER}: {exc}")
        raise
    admin.execute(f'CREATE DATABASE "{name}"')
    settings = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": info.get("user", "postgres"),
        "HOST": info.get("host", "127.0.0.1"),
        "PORT": info.get("port", "5432"),
    }
    try:
        yield f"\nDATABASES = {{'default': {settings!r}}}\n"
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def find_python(minor: str) -> str | None:
    """A working ``python3.<minor>``: on PATH (a pyenv shim may exist and still fail), else
    under pyenv."""
    candidates = [shutil.which(f"python{minor}") or ""]
    candidates += [
        str(p) for p in sorted(Path("/root/.pyenv/versions").glob(f"{minor}.*/bin/python3"))
    ]
    for candidate in filter(None, candidates):
        ok = subprocess.run(
            [candidate, "-c", "import venv, ensurepip"], capture_output=True, timeout=60
        )
        if ok.returncode == 0:
            return candidate
    return None
