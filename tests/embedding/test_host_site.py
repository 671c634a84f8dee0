"""A host site as a new user makes one (tests/embedding/host.py): ``python -m venv`` with the
test interpreter's own pip, the embedding guide's (docs/how-to/embedding.md) ``pip`` lines as
written (the newest Django 6.1 comes with them), ``django-admin startproject mysite`` with its
own ``shop`` app and the guide's blocks appended as they stand. On SQLite, with no psycopg
installed: migrate and a clean ``check``; a promise created inside the host's atomic block rolls
back with the host's row; the admin's promise pages render from the wheel's templates, and the
optional overview block routes the overview and links it; ``/resonate/api/schema/`` answers 200
beside a host REST_FRAMEWORK unlike ours; the guide's "From your code" example runs as written;
the Django tasks guide's settings, task and view run as written under its worker command; the
steps' reads use their indexes; and under the guide's uvicorn line, ``POST /resonate/`` answers,
a timer fires, the SDK's sleep workflow completes, and the host logs no error while the steps
run. Then the guide's PostgreSQL line, and the same on a fresh PostgreSQL database. And the
guide's "With Celery": its ``pip`` line, files and four commands, on PostgreSQL.

The matrix (Python 3.12 and 3.13, Django 6.0 and 6.1, a database migrated under one and served
under the other) is tests/embedding/test_install.py, ``make test-install``."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

from tests.embedding.host import (
    Host,
    PipLines,
    a_timer_fires_and_the_sdk_sleeps,
    errors_in,
    file_blocks,
    free_port,
    guide_block,
    manage,
    new_host,
    new_site,
    pg_database,
    plans_in,
    processes,
    run,
    sdk_python,
    serve_and_run_the_steps,
    site_env,
    unavailable,
    wait_for_port,
)
from tests.embedding.plans import plan_problems
from tests.support.docs_blocks import block

SHOP_MODELS = """from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    paid = models.BooleanField(default=False)
    email = models.EmailField(default="")
    total = models.DecimalField(max_digits=10, decimal_places=2, default=0)
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
index = client.get("/admin/")
out["admin_index"] = index.status_code
out["overview_link"] = b'href="/admin/resonate/overview/"' in index.content
overview = client.get("/admin/resonate/overview/")
out["overview"] = [overview.status_code, b"Overview" in overview.content]
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

# The guide's "From your code" runs as shop/orders.py; then an order is placed, its charge settled.
FROM_YOUR_CODE = r"""
import json
from promises import services as promises
from promises.models import Listener
from resonate_project.core.clock import now_ms
from schedules.models import Schedule
from shop import orders
from shop.models import Order

order = Order(item="lamp")
orders.place_order(order)
out = {
    "charge": promises.promise_get(id=f"order/{order.pk}/charge", now=now_ms())["state"],
    "listeners": Listener.objects.filter(awaited_id=f"order/{order.pk}/approval").count(),
    "schedule": Schedule.objects.filter(id="nightly-report").exists(),
}
promises.promise_settle(id=f"order/{order.pk}/charge", state="resolved", now=now_ms())
out["paid"] = Order.objects.get(pk=order.pk).paid
print("RESULT " + json.dumps(out))
"""


def from_your_code() -> str:
    """The embedding guide's "From your code" example, as it stands."""
    return guide_block("embedding-from-your-code").text


DJANGO_TASKS = "docs/how-to/django-tasks.md"

# The test's own mail settings, so the guide's send_mail() needs no SMTP server: Django 6.1's
# startproject configures MAILERS (and refuses EMAIL_BACKEND beside it), 6.0's neither.
LOCMEM_MAIL = """
_LOCMEM = "django.core.mail.backends.locmem.EmailBackend"
if "MAILERS" in globals():
    MAILERS = {"default": {"BACKEND": _LOCMEM}}
else:
    EMAIL_BACKEND = _LOCMEM
"""

# The checkout view of the Django tasks guide, called as a request would (shop/views.py).
CHECKOUT = r"""
import json
from django.test import RequestFactory
from shop import views
res = views.checkout(RequestFactory().post("/", {"email": "ada@example.com", "total": "12.50"}))
print("RESULT " + json.dumps({"status": res.status_code, **json.loads(res.content)}))
"""

RECEIPT = r"""
import json, sys
from django.test import RequestFactory
from shop import views
res = views.receipt_status(RequestFactory().get("/"), "%s")
print("RESULT " + json.dumps({"status": res.status_code, **json.loads(res.content)}))
"""


def django_tasks_run(host: Host, site: Path) -> None:
    """The Django tasks guide in the host: its TASKS settings, ``shop/tasks.py`` and
    ``shop/views.py`` as written; the checkout view enqueues, and under the guide's worker
    command the receipt is sent and its status view reports the return value."""
    worker = block(DJANGO_TASKS, "django-tasks-worker").lines()
    assert len(worker) == 1, worker
    answer = result(manage(host, site, "shell", "-c", CHECKOUT))
    assert answer["status"] == 201, answer
    log = site / "django-tasks-worker.log"
    with processes(host, site, [shlex.split(worker[0])], [log]) as (proc,):
        deadline = time.monotonic() + 60
        while True:
            status = result(manage(host, site, "shell", "-c", RECEIPT % answer["receipt"]))
            if "sent_to" in status or time.monotonic() > deadline or proc.poll() is not None:
                break
            time.sleep(0.5)
    assert status == {"status": 200, "sent_to": "ada@example.com"}, (status, log.read_text())
    assert errors_in(log) == [], log.read_text()[-4000:]


def result(out: str) -> dict[str, object]:
    return json.loads(out.split("RESULT ", 1)[1])


def a_site_works(host: Host, name: str, databases: str, sdk: Path) -> None:
    """Everything in the module docstring, for one site on ``databases`` (the host's own
    DATABASES line; empty: startproject's SQLite)."""
    site = new_site(host, name)
    manage(host, site, "startapp", "shop")
    (site / "shop/models.py").write_text(SHOP_MODELS)
    with (site / "mysite/settings.py").open("a") as f:
        f.write(HOST_REST + databases)
    (site / "shop/orders.py").write_text(from_your_code())
    if not databases:  # the Django tasks guide, once (SQLite)
        (site / "shop/tasks.py").write_text(block(DJANGO_TASKS, "django-tasks-task").text)
        (site / "shop/views.py").write_text(block(DJANGO_TASKS, "django-tasks-views").text)
        with (site / "mysite/settings.py").open("a") as f:
            f.write("\n" + block(DJANGO_TASKS, "django-tasks-settings").text)
            f.write(LOCMEM_MAIL)
    manage(host, site, "makemigrations", "shop")
    manage(host, site, "migrate", "-v", "0")
    assert "no issues" in manage(host, site, "check")

    got = result(manage(host, site, "shell", "-c", CHECKS))
    assert got["rolled_back"] == [0, 0, 0, 0]  # no order, promise, task or outbox row
    assert got["admin_list"] == 200
    assert got["admin_detail"] == 200  # the wheel's templates
    assert got["admin_index"] == 200
    assert got["overview_link"]  # the optional block, as written, links it
    assert got["overview"] == [200, True]  # and routes it, ahead of the admin's catch-all
    assert got["admin_action"] == 200
    assert got["admin_action_page"]
    assert got["schema"] == 200
    paths = got["schema_paths"]
    assert isinstance(paths, list)
    assert "/resonate/" in paths  # the envelope, at its prefix
    assert "/resonate/api/promises" in paths
    assert all(p.startswith("/resonate/") for p in paths)
    assert got["api_404"]["error"]["status"] == 404  # type: ignore[index]

    ordered = result(manage(host, site, "shell", "-c", FROM_YOUR_CODE))
    assert ordered == {"charge": "pending", "listeners": 1, "schedule": True, "paid": True}

    if not databases:
        assert plan_problems(plans_in(host, site)) == []
        django_tasks_run(host, site)
    serve_and_run_the_steps(host, site, sdk)


def test_a_startproject_site_embeds_the_apps_with_the_readme_lines(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pip, sdk = PipLines.from_readme(), sdk_python()
    host = new_host(
        tmp_path_factory.mktemp("embedding"), getattr(sys, "_base_executable", sys.executable)
    )
    host.pip("install", *pip.apps)
    assert host.django().startswith("6.1."), host.django()  # the newest, in a new site
    assert not host.has("psycopg")  # on SQLite nothing needs it
    a_site_works(host, "site-sqlite", "", sdk)

    host.pip("install", *pip.postgresql)
    with pg_database("resonate_embed") as databases:
        a_site_works(host, "site-postgresql", databases, sdk)


def celery_blocks() -> tuple[dict[str, str], list[str]]:
    """The embedding guide's "With Celery" blocks by file, and its Celery commands."""
    files = file_blocks(
        "embedding-celery-app", "embedding-celery-init", "embedding-celery-settings"
    )
    return files, guide_block("embedding-celery-serve").lines()


# Redis database 8: the integration suite's sessions take 9 and up.
HOST_BROKER = "redis://127.0.0.1:6379/8"


def test_a_host_runs_the_steps_on_its_own_celery_worker_and_beat(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The embedding guide's "With Celery", on PostgreSQL: its ``pip`` lines (the apps,
    psycopg, then the ``[celery]`` extra, which takes Django back to 6.0), the host's own Celery
    app (the guide's two files), the settings block, then the four commands exactly as shown.
    The wrapped app runs no steps with a broker set, so a timer that fires and the SDK's sleep
    workflow prove that the host's worker and beat do; the worker's log shows it ran
    ``resonate.tick``, and no process logs an error."""
    import redis

    try:
        redis.Redis.from_url(HOST_BROKER).flushdb()
    except redis.RedisError as exc:
        unavailable(f"Redis unreachable: {exc}")
    pip, sdk = PipLines.from_readme(), sdk_python()
    host = new_host(
        tmp_path_factory.mktemp("embedding-celery"),
        getattr(sys, "_base_executable", sys.executable),
    )
    for line in (pip.apps, pip.postgresql, pip.celery):
        host.pip("install", *line)
    assert host.django().startswith("6.0."), host.django()  # django-celery-beat: Django<6.1

    blocks, commands = celery_blocks()
    assert set(blocks) == {"celery.py", "__init__.py", "settings.py"}
    assert commands[0] == "python manage.py migrate"
    assert commands[1:3] == ["celery -A mysite worker -l info", "celery -A mysite beat -l info"]
    assert commands[3].startswith("uvicorn mysite.asgi:application --port ")
    port = free_port()
    serve = shlex.split(commands[3])
    serve[serve.index("--port") + 1] = str(port)
    with pg_database("resonate_embed_celery") as databases:
        site = new_site(host, "site-celery")
        (site / "mysite/celery.py").write_text(blocks["celery.py"])
        for file in ("__init__.py", "settings.py"):
            with (site / "mysite" / file).open("a") as f:
                f.write("\n" + blocks[file])
        with (site / "mysite/settings.py").open("a") as f:
            # The test's own database and Redis database; the guide's lines stand above.
            f.write(f"{databases}CELERY_BROKER_URL = {HOST_BROKER!r}\n")
        env = site_env(host)
        run(*shlex.split(commands[0]), "-v", "0", cwd=site, env=env)
        assert "no issues" in run("python", "manage.py", "check", cwd=site, env=env)
        logs = [site / "worker.log", site / "beat.log", site / "uvicorn.log"]
        argvs = [shlex.split(commands[1]), shlex.split(commands[2]), serve]
        with processes(host, site, argvs, logs) as procs:
            wait_for_port(port, procs[2], logs[2], "uvicorn")
            a_timer_fires_and_the_sdk_sleeps(port, site, sdk)
    worker_log = logs[0].read_text()
    assert "resonate.tick" in worker_log, worker_log[-3000:]
    assert "Sending due task resonate-tick" in logs[1].read_text(), logs[1].read_text()[-3000:]
    for log in logs:
        assert errors_in(log) == [], f"{log.name}:\n{log.read_text()[-4000:]}"
