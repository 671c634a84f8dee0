"""Embedding in a host site, in process: the URLs under a prefix, the wrapped ASGI app's fast
path, the resource API under a host's own REST_FRAMEWORK, the system checks, the wake-up channel
and the Celery app. (tests/embedding installs the wheel into a real ``startproject`` site.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection
from django.test import Client, override_settings

from promises.models import Promise
from resonate_project.core.protocol import PROTOCOL_VERSION
from resonate_project.embed import checks
from resonate_project.engine import wake
from tests.support.factories import FAR

HOST = override_settings(ROOT_URLCONF="tests.support.embed_site")

# A host's REST framework settings, each of which broke /api/ or its schema when the views
# read them: another exception handler, renderer, schema class, versioning, default permission.
HOST_REST_FRAMEWORK = {
    "EXCEPTION_HANDLER": "rest_framework.views.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.BrowsableAPIRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.FormParser"],
    "DEFAULT_SCHEMA_CLASS": "rest_framework.schemas.openapi.AutoSchema",
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.URLPathVersioning",
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAdminUser"],
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": "1/day"},
}
HOST_SPECTACULAR = {"TITLE": "the host's API", "PREPROCESSING_HOOKS": []}

ENVELOPE = {"kind": "promise.create", "head": {"corrId": "c1", "version": PROTOCOL_VERSION}}


def create(id: str) -> dict[str, Any]:
    return {**ENVELOPE, "data": {"id": id, "timeoutAt": FAR, "param": {}, "tags": {}}}


@pytest.mark.django_db
def test_the_envelope_poll_and_api_answer_under_the_prefix(client: Client) -> None:
    with HOST:
        res = client.post("/resonate/", create("host/1"), content_type="application/json")
        assert res.status_code == 200, res.content
        assert res.json()["head"]["status"] == 200
        assert client.get("/").content == b"the host's own page"
        for url in ("/resonate/api/promises/host/1", "/resonate/api/promises?idPrefix=host/"):
            assert client.get(url).status_code == 200, url
        schema = client.get("/resonate/api/schema/?format=json")
        assert schema.status_code == 200
        paths = json.loads(schema.content)["paths"]
        assert "/resonate/" in paths  # the envelope, documented at its prefix
        assert "/resonate/api/promises" in paths
        assert "/" not in paths  # the host's own view is the host's schema's business
        assert client.get("/resonate/api/docs/").status_code == 200


@pytest.mark.django_db
def test_collections_and_actions_answer_with_and_without_a_trailing_slash(client: Client) -> None:
    client.post("/api/promises", {"id": "s1", "timeoutAt": FAR}, content_type="application/json")
    for url in ("/api/promises", "/api/promises/", "/api/tasks/", "/api/schedules/"):
        assert client.get(url).status_code == 200, url
    res = client.post("/api/promises/s1/settle/", {"state": "resolved"}, "application/json")
    assert res.status_code == 200
    assert res.json()["state"] == "resolved"
    schema = json.loads(client.get("/api/schema/?format=json").content)
    assert "/api/promises/" not in schema["paths"]  # the slash spelling is an alias


@pytest.mark.django_db
def test_a_hosts_rest_framework_settings_change_nothing_under_api(client: Client) -> None:
    with override_settings(
        REST_FRAMEWORK=HOST_REST_FRAMEWORK, SPECTACULAR_SETTINGS=HOST_SPECTACULAR
    ):
        missing = client.get("/api/promises/nothing")
        assert missing.status_code == 404
        assert missing.json()["error"]["status"] == 404
        assert missing.json()["error"]["field"] is None
        bad = client.post("/api/promises", {"id": "x"}, content_type="application/json")
        assert bad.status_code == 400
        assert bad.json()["error"]["field"] == "timeoutAt"
        for _ in range(2):  # the host's 1/day throttle does not apply
            assert client.get("/api/promises").status_code == 200
        schema = client.get("/api/schema/?format=json")
        assert schema.status_code == 200
        assert json.loads(schema.content)["info"]["title"] == "django-resonate"
        assert client.get("/api/docs/").status_code == 200


def test_importing_the_apps_makes_no_celery_app_current() -> None:
    code = (
        "import django; django.setup(); import promises.services, outbox.tasks; "
        "from celery import current_app; print(current_app.main)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() != "resonate"


def test_celery_finds_the_standalone_app() -> None:
    code = "from celery.app.utils import find_app; print(find_app('resonate_project').main)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "resonate"


def test_the_standalone_server_sends_the_drain_through_its_own_app() -> None:
    assert wake.celery_app().main == "resonate"
    with override_settings(RESONATE={}):
        from celery import current_app

        assert wake.celery_app() is current_app


def test_the_wake_up_channel_is_per_database_unless_named() -> None:
    name = settings.DATABASES["default"]["NAME"]
    assert wake.channel() == f"resonate:outbox:{name}"
    with override_settings(RESONATE={"NOTIFY_CHANNEL": "shop:resonate"}):
        assert wake.channel() == "shop:resonate"


SQLITE = {"ENGINE": "django.db.backends.sqlite3", "NAME": "host.sqlite3"}


def ids(errors: list[Any]) -> list[str]:
    return [e.id for e in errors]


def test_sqlite_without_immediate_transactions_is_an_error() -> None:
    errors = checks.sqlite_without_immediate({"default": SQLITE})
    assert ids(errors) == ["resonate.E030"]
    assert '"transaction_mode": "IMMEDIATE"' in str(errors[0].hint)
    immediate = {**SQLITE, "OPTIONS": {"transaction_mode": "IMMEDIATE"}}
    assert checks.sqlite_without_immediate({"default": immediate}) == []
    ours = {**SQLITE, "ENGINE": "resonate_project.sqlite"}  # the writer-lock engine is SQLite too
    assert ids(checks.sqlite_without_immediate({"default": ours})) == ["resonate.E030"]


def test_no_runner_for_the_steps_is_an_error() -> None:
    with override_settings(CELERY_BROKER_URL="", ASGI_APPLICATION=None):
        errors = checks.check_runner(None)
    assert ids(errors) == ["resonate.E031"]
    assert "wrap(" in str(errors[0].hint)
    with override_settings(
        CELERY_BROKER_URL="", ASGI_APPLICATION="tests.support.embed_site.application"
    ):
        assert checks.check_runner(None) == []
    with override_settings(CELERY_BROKER_URL="redis://localhost:6379/0", ASGI_APPLICATION=None):
        assert checks.check_runner(None) == []


def test_sse_routes_on_a_wsgi_only_site_are_an_error() -> None:
    with override_settings(ASGI_APPLICATION=None, WSGI_APPLICATION="host.wsgi.application"):
        errors = checks.check_sse_needs_asgi(None)
    assert ids(errors) == ["resonate.E032"]
    assert "ASGI_APPLICATION" in str(errors[0].hint)


def test_the_projects_own_settings_pass_the_checks() -> None:
    assert checks.check_sqlite_immediate(None) == []
    assert checks.check_runner(None) == []
    assert checks.check_sse_needs_asgi(None) == []


def asgi(app: Any, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    given = False

    async def receive() -> dict[str, Any]:
        nonlocal given
        if given:  # the client stays connected until the response is sent
            await asyncio.Event().wait()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"host", b"localhost"), (b"content-type", b"application/json")]
    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    asyncio.run(app(scope, receive, send))
    # The handler ran on asgiref's shared sync thread (WEB_THREADS=0 here): close that thread's
    # connection, or the test database cannot be dropped at the end of the run.
    asyncio.run(sync_to_async(close_connection, thread_sensitive=True)())
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def close_connection() -> None:
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_the_wrapped_app_answers_the_envelope_at_the_prefix_from_the_urlconf() -> None:
    from tests.support.embed_site import application

    with HOST:
        status, body = asgi(application, "POST", "/resonate/", json.dumps(create("w/1")).encode())
        assert status == 200
        assert json.loads(body)["head"]["status"] == 200
        status, _ = asgi(application, "POST", "/resonate", json.dumps(create("w/2")).encode())
        assert status == 200
    assert set(Promise.objects.values_list("id", flat=True)) == {"w/1", "w/2"}


@pytest.mark.django_db(transaction=True)
def test_a_wrapped_app_without_the_routes_leaves_every_request_to_the_host() -> None:
    from django.core.asgi import get_asgi_application

    from resonate_project.embed.asgi import wrap

    with override_settings(ROOT_URLCONF="tests.support.embed_bare"):
        app = wrap(get_asgi_application())
        assert asgi(app, "GET", "/") == (200, b"the host's own page")
        status, _ = asgi(app, "POST", "/", json.dumps(create("bare/1")).encode())
    assert status == 403  # Django answered (CSRF), not the envelope
    assert not Promise.objects.filter(pk="bare/1").exists()
