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

import json
import os
import re
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


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the built wheel and what README "Embedding" installs."""
    tmp = tmp_path_factory.mktemp("embedding")
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
        [tmp / "venv/bin/pip", "install", "-q", str(wheel), "uvicorn", "psycopg[binary]", SDK],
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


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    """The host's own DATABASES line: the startproject default (SQLite), or a fresh PostgreSQL
    database on the test server, dropped afterwards."""
    if request.param == "sqlite":
        yield ""
        return
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    info = conninfo_to_dict(PG_SERVER)
    name = f"resonate_embed_{os.getpid()}_{int(time.time())}"
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


def test_a_startproject_site_embeds_the_apps_with_the_readme_lines(
    venv: Path, database: str
) -> None:
    bin = venv / "venv/bin"
    site = venv / f"site-{'postgresql' if database else 'sqlite'}"
    site.mkdir()
    run(bin / "django-admin", "startproject", "mysite", site, cwd=venv)
    run(bin / "python", "manage.py", "startapp", "shop", cwd=site)
    (site / "shop/models.py").write_text(SHOP_MODELS)
    blocks = readme_blocks()
    assert set(blocks) == {"settings.py", "urls.py", "asgi.py"}
    added = sum(1 for code in blocks.values() for line in code.splitlines() if line.strip())
    assert added <= 10, f"README asks a host for {added} lines"
    for name, code in blocks.items():
        with (site / "mysite" / name).open("a") as f:
            f.write("\n" + code)
    with (site / "mysite/settings.py").open("a") as f:
        f.write(HOST_REST + database)
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mysite.settings", "PYTHONPATH": ""}
    env.pop("DATABASE_URL", None)
    env.pop("RESONATE_WEB_THREADS", None)
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
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert server.poll() is None, server.stdout.read() if server.stdout else ""
                assert time.monotonic() < deadline, "uvicorn did not start"
                time.sleep(0.2)
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
        # Nothing but the wrapped app runs the steps: the timer must fire under plain uvicorn.
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
            [bin / "python", "sleep_workflow.py", f"http://127.0.0.1:{port}/resonate"],
            cwd=site,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "RESULT HELLO WORLD" in sdk.stdout, sdk.stdout[-2000:] + sdk.stderr[-2000:]
    finally:
        server.terminate()
        server.wait(10)
