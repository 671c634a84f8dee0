"""A host site as a new user makes one: ``django-admin startproject mysite`` with its own ``shop``
app, the built wheel (not an editable install) in a fresh virtualenv, and README "Embedding"'s
blocks appended as they stand. Then, on SQLite: migrate and a clean ``check``; a promise created
inside the host's atomic block rolls back with the host's row; the admin's promise pages render
from the wheel's templates; ``/resonate/api/schema/`` answers 200 beside a host REST_FRAMEWORK
unlike ours; and under plain uvicorn running the wrapped app, ``POST /resonate/`` answers and a
promise's timeout is applied by the in-process steps. The same on PostgreSQL (a fresh database
on the test server; the host then sets its own DATABASES).

Needs network or a pip cache for the virtualenv; without one this fails under CI=true and is
skipped, with the reason, otherwise."""

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
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CI = os.environ.get("CI") == "true"

SHOP_MODELS = """from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    paid = models.BooleanField(default=False)
"""

# The host's own REST framework settings, unlike ours in every way that broke /api/ before.
HOST_REST = """
REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_SCHEMA_CLASS": "rest_framework.schemas.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "rest_framework.views.exception_handler",
}
INSTALLED_APPS += ["shop"]
"""

# Run inside the host site (manage.py shell): the user-visible checks that need no server.
CHECKS = r"""
import json
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from outbox.models import Message
from promises import services as promises
from promises.models import Promise
from resonate_project.core.clock import now_ms
from shop.models import Order
from tasks_app.models import Task

out = {}
try:
    with transaction.atomic():
        Order.objects.create(item="book")
        promises.promise_create(
            id="order/rolled-back", timeout_at=now_ms() + 60_000, now=now_ms(),
            tags={"resonate:target": "poll://any@billing"},
        )
        raise RuntimeError("the host's own write failed")
except RuntimeError:
    pass
out["rolled_back"] = [Order.objects.count(), Promise.objects.count(), Task.objects.count(),
                      Message.objects.count()]
promises.promise_create(id="order/1", timeout_at=now_ms() + 60_000, now=now_ms())
admin = User.objects.create_superuser("admin", "a@example.com", "pw")
client = Client(HTTP_HOST="localhost")
client.force_login(admin)
out["admin_list"] = client.get("/admin/promises/promise/").status_code
out["admin_detail"] = client.get("/admin/promises/promise/order/1/change/").status_code
out["admin_index"] = client.get("/admin/").status_code
res = client.post(
    "/admin/promises/promise/", {"action": "resolve_promises", "_selected_action": ["order/1"]}
)
out["admin_action"] = res.status_code
out["admin_action_page"] = b"Resolve" in res.content and b"order/1" in res.content
anon = Client(HTTP_HOST="localhost")
schema = anon.get("/resonate/api/schema/?format=json")
schema.ok = schema.status_code == 200
out["schema"] = schema.status_code
out["schema_paths"] = sorted(json.loads(schema.content)["paths"]) if schema.ok else []
out["api_404"] = anon.get("/resonate/api/promises/nothing").json()
print("RESULT " + json.dumps(out))
"""


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    res = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, f"{args}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def readme_blocks() -> dict[str, str]:
    """README "Embedding"'s ``# append to mysite/<file>`` blocks, by file."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Embedding") : text.index("## Conformance")]
    blocks = re.findall(r"```python\n# append to mysite/(\S+)\n(.*?)```", section, re.S)
    return dict(blocks)


def build_venv(tmp: Path, extras: str = "") -> Path:
    """A fresh virtualenv in ``tmp`` holding the built wheel (with ``extras``) and what README
    "Embedding" installs."""
    # Built from a copy: setuptools leaves build/ beside the sources.
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
    wheel = next((tmp / "dist").glob("django_resonate-*.whl"))
    base = getattr(sys, "_base_executable", sys.executable)
    run(base, "-m", "venv", tmp / "venv", cwd=tmp)
    pip = subprocess.run(
        [
            str(tmp / "venv/bin/pip"),
            *("install", "-q", f"{wheel}{extras}", "uvicorn", "psycopg[binary]", SDK),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if pip.returncode != 0:
        reason = f"could not install the wheel's dependencies: {pip.stderr[-1500:]}"
        if CI:
            pytest.fail(reason)
        pytest.skip(reason)
    return tmp


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_venv(tmp_path_factory.mktemp("embedding"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


SDK = "resonate-sdk==0.8.1"

# README "Using the official SDKs"'s workflow: a durable step and a durable sleep, which hangs
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
    print("RESULT", await resonate.run("hello-embedded", hello, "world").result(), flush=True)
    await resonate.stop()


asyncio.run(main())
"""

PG_SERVER = os.environ.get("DATABASE_URL_PG", "postgresql://postgres@127.0.0.1:5432/resonate")


@contextlib.contextmanager
def pg_database(prefix: str) -> Iterator[str]:
    """A fresh database on the test server, dropped afterwards: the host's DATABASES line."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    info = conninfo_to_dict(PG_SERVER)
    name = f"{prefix}_{os.getpid()}_{int(time.time())}"
    try:
        admin = psycopg.connect(make_conninfo(PG_SERVER, dbname="postgres"), autocommit=True)
    except psycopg.OperationalError as exc:
        if CI:
            pytest.fail(f"PostgreSQL unreachable at {PG_SERVER}: {exc}")
        pytest.skip(f"PostgreSQL unreachable at {PG_SERVER}: {exc}")
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


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    """The host's own DATABASES line: the startproject default (SQLite), or a fresh PostgreSQL
    database on the test server."""
    if request.param == "sqlite":
        yield ""
        return
    with pg_database("resonate_embed") as line:
        yield line


def new_site(venv: Path, name: str) -> Path:
    """``django-admin startproject mysite`` with README "Embedding"'s three blocks appended."""
    site = venv / name
    site.mkdir()
    run(venv / "venv/bin/django-admin", "startproject", "mysite", site, cwd=venv)
    blocks = readme_blocks()
    assert set(blocks) == {"settings.py", "urls.py", "asgi.py"}
    added = sum(1 for code in blocks.values() for line in code.splitlines() if line.strip())
    assert added <= 10, f"README asks a host for {added} lines"
    for file, code in blocks.items():
        with (site / "mysite" / file).open("a") as f:
            f.write("\n" + code)
    return site


def site_env() -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mysite.settings", "PYTHONPATH": ""}
    for name in ("DATABASE_URL", "RESONATE_WEB_THREADS", "CELERY_BROKER_URL", "REDIS_URL"):
        env.pop(name, None)
    return env


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.2)


def a_timer_fires_and_the_sdk_sleeps(port: int, site: Path) -> None:
    """A ``resonate:timer`` promise reads resolved after its deadline, and the SDK's sleep
    workflow (a durable step, then ``ctx.sleep``) completes against ``/resonate``: only a step
    runner resumes the suspended task when the sleep's timer is due (a read alone would not)."""
    now = int(time.time() * 1000)
    reply = envelope(
        port,
        "promise.create",
        id="timer/1",
        timeoutAt=now + 1500,
        param={},
        tags={"resonate:timer": "true"},
    )
    assert reply["head"]["status"] == 200, reply  # type: ignore[index]
    deadline = time.monotonic() + 15
    while True:
        got = envelope(port, "promise.get", id="timer/1")
        state = got["data"]["promise"]["state"]  # type: ignore[index]
        if state != "pending":
            break
        assert time.monotonic() < deadline, "the timer never fired"
        time.sleep(0.5)
    assert state == "resolved"  # a timer resolves at its deadline

    (site / "sleep_workflow.py").write_text(SLEEP_WORKFLOW)
    sdk = subprocess.run(
        [site.parent / "venv/bin/python", "sleep_workflow.py", f"http://127.0.0.1:{port}/resonate"],
        cwd=site,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "RESULT HELLO WORLD" in sdk.stdout, sdk.stdout[-2000:] + sdk.stderr[-2000:]


def test_a_startproject_site_embeds_the_apps_with_the_readme_lines(
    venv: Path, database: str
) -> None:
    bin = venv / "venv/bin"
    site = new_site(venv, f"site-{'postgresql' if database else 'sqlite'}")
    run(bin / "python", "manage.py", "startapp", "shop", cwd=site)
    (site / "shop/models.py").write_text(SHOP_MODELS)
    with (site / "mysite/settings.py").open("a") as f:
        f.write(HOST_REST + database)
    env = site_env()
    manage: list[str | Path] = [bin / "python", "manage.py"]

    run(*manage, "makemigrations", "shop", cwd=site, env=env)
    run(*manage, "migrate", "-v", "0", cwd=site, env=env)
    assert "no issues" in run(*manage, "check", cwd=site, env=env)

    out = run(*manage, "shell", "-c", CHECKS, cwd=site, env=env)
    result = json.loads(out.split("RESULT ", 1)[1])
    assert result["rolled_back"] == [0, 0, 0, 0]  # no order, promise, task or outbox row
    assert result["admin_list"] == 200
    assert result["admin_detail"] == 200  # the wheel's templates
    assert result["admin_index"] == 200
    assert result["admin_action"] == 200
    assert result["admin_action_page"]
    assert result["schema"] == 200
    assert "/resonate/" in result["schema_paths"]  # the envelope, at its prefix
    assert "/resonate/api/promises" in result["schema_paths"]
    assert all(p.startswith("/resonate/") for p in result["schema_paths"])
    assert result["api_404"]["error"]["status"] == 404  # our error shape, not the host's

    port = free_port()
    server = subprocess.Popen(
        [bin / "uvicorn", "mysite.asgi:application", "--port", str(port), "--log-level", "warning"],
        cwd=site,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_port(port, server, "uvicorn")
        # Nothing but the wrapped app runs the steps: the timer must fire under plain uvicorn.
        a_timer_fires_and_the_sdk_sleeps(port, site)
    finally:
        server.terminate()
        server.wait(10)


def celery_blocks() -> tuple[dict[str, str], list[str]]:
    """README "Embedding"'s ``# with Celery: ...`` blocks by file, and its Celery commands."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("**With Celery**") : text.index("## Conformance")]
    blocks = re.findall(
        r"```python\n# with Celery: (create|append to) mysite/(\S+)\n(.*?)```", section, re.S
    )
    commands = re.search(r"```sh\n(python manage.py migrate\ncelery.*?)```", section, re.S)
    assert commands, "README shows no Celery commands"
    lines = [line.split("#")[0].strip() for line in commands.group(1).splitlines()]
    return {file: code for _, file, code in blocks}, [line for line in lines if line]


# Redis database 8: the integration suite's sessions take 9 and up.
HOST_BROKER = "redis://127.0.0.1:6379/8"


def test_a_host_runs_the_steps_on_its_own_celery_worker_and_beat(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """README "Embedding", "With Celery": the host's own Celery app (the README's two files),
    the settings block, then the four commands exactly as shown, on PostgreSQL. The wrapped app
    runs no steps with a broker set, so a timer that fires and the SDK's sleep workflow prove
    that the host's worker and beat do; the worker's log shows it ran ``resonate.tick``."""
    import redis

    venv = build_venv(tmp_path_factory.mktemp("embedding-celery"), "[celery]")
    site = new_site(venv, "site-celery")
    blocks, commands = celery_blocks()
    assert set(blocks) == {"celery.py", "__init__.py", "settings.py"}
    (site / "mysite/celery.py").write_text(blocks["celery.py"])
    for file in ("__init__.py", "settings.py"):
        with (site / "mysite" / file).open("a") as f:
            f.write("\n" + blocks[file])
    assert commands[0] == "python manage.py migrate"
    assert commands[1:3] == ["celery -A mysite worker -l info", "celery -A mysite beat -l info"]
    assert commands[3].startswith("uvicorn mysite.asgi:application --port ")
    try:
        redis.Redis.from_url(HOST_BROKER).flushdb()
    except redis.RedisError as exc:
        if CI:
            pytest.fail(f"Redis unreachable: {exc}")
        pytest.skip(f"Redis unreachable: {exc}")
    port = free_port()
    with pg_database("resonate_embed_celery") as databases:
        with (site / "mysite/settings.py").open("a") as f:
            # The test's own database and Redis database; the README's lines stand above.
            f.write(f"{databases}CELERY_BROKER_URL = {HOST_BROKER!r}\n")
        env = {**site_env(), "PATH": f"{venv / 'venv/bin'}:{os.environ['PATH']}"}
        run(*shlex.split(commands[0]), "-v", "0", cwd=site, env=env)
        assert "no issues" in run("python", "manage.py", "check", cwd=site, env=env)
        serve = shlex.split(commands[3])
        serve[serve.index("--port") + 1] = str(port)
        procs: list[subprocess.Popen[bytes]] = []
        logs = [site / "worker.log", site / "beat.log", site / "uvicorn.log"]
        try:
            for argv, log in zip((commands[1], commands[2], shlex.join(serve)), logs, strict=True):
                procs.append(
                    subprocess.Popen(
                        shlex.split(argv),
                        cwd=site,
                        env=env,
                        stdout=log.open("wb"),
                        stderr=subprocess.STDOUT,
                    )
                )
            wait_for_port(port, procs[2], "uvicorn")
            a_timer_fires_and_the_sdk_sleeps(port, site)
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        worker_log = logs[0].read_text()
        assert "resonate.tick" in worker_log, worker_log[-3000:]
        assert "Sending due task resonate-tick" in logs[1].read_text(), logs[1].read_text()[-3000:]
