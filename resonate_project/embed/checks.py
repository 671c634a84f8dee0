"""System checks for a site that runs the apps (the standalone server or a host): the
configuration mistakes that otherwise show up as lost work or 500s (docs/how-to/embedding.md)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.urls import NoReverseMatch, reverse
from django.utils.module_loading import import_string

from resonate_project.engine.wake import celery_enabled

# The standalone server's application: `manage.py serve` runs the steps when no broker is set.
STANDALONE_ASGI = "resonate_project.asgi.application"


@register()
def check_sqlite_immediate(app_configs: Any, **kwargs: Any) -> list[Error]:
    return sqlite_without_immediate(settings.DATABASES)


def sqlite_without_immediate(databases: dict[str, Any]) -> list[Error]:
    """Concurrent writers on SQLite's default deferred transactions fail with "database is
    locked" when they upgrade from a read; IMMEDIATE makes them queue on the write lock."""
    errors = []
    for alias, db in databases.items():
        if db.get("ENGINE") not in ("django.db.backends.sqlite3", "resonate_project.sqlite"):
            continue
        mode = str(db.get("OPTIONS", {}).get("transaction_mode", "")).upper()
        if mode != "IMMEDIATE":
            errors.append(
                Error(
                    f'DATABASES["{alias}"] is SQLite without "transaction_mode": "IMMEDIATE"',
                    hint=f'add DATABASES["{alias}"]["OPTIONS"] = {{"transaction_mode": '
                    '"IMMEDIATE"}: concurrent Resonate requests otherwise fail with '
                    '"database is locked".',
                    id="resonate.E030",
                )
            )
    return errors


def _asgi_runs_steps() -> bool:
    path = getattr(settings, "ASGI_APPLICATION", None)
    if not path:
        return False
    if path == STANDALONE_ASGI:
        return True
    try:
        app = import_string(path)
    except Exception:  # Django reports a broken ASGI_APPLICATION when it serves
        return False
    return bool(getattr(app, "runs_steps", False))


@register()
def check_runner(app_configs: Any, **kwargs: Any) -> list[Error]:
    """Timeouts, timers, retries, schedules and HTTP push need a runner: Celery (worker and
    beat) or the ASGI wrapper's threads."""
    if celery_enabled() or _asgi_runs_steps():
        return []
    return [
        Error(
            "nothing runs Resonate's internal steps (timeouts, timers such as ctx.sleep, "
            "retries, schedules) or its HTTP push",
            hint="in asgi.py: application = resonate_project.embed.asgi.wrap("
            "get_asgi_application()), and ASGI_APPLICATION naming it; or set "
            "CELERY_BROKER_URL and run a Celery worker and beat with "
            "CELERY_BEAT_SCHEDULER = 'resonate_project.runtime.beat:MetronomeScheduler' "
            "(docs/how-to/embedding.md#with-celery).",
            id="resonate.E031",
        )
    ]


@register(Tags.urls)
def check_sse_needs_asgi(app_configs: Any, **kwargs: Any) -> list[Error]:
    """SSE streams are coroutines: under WSGI (``runserver``) they deliver nothing."""
    if getattr(settings, "ASGI_APPLICATION", None) or not getattr(
        settings, "WSGI_APPLICATION", None
    ):
        return []
    try:
        reverse("resonate-poll", args=["group", "id"])
    except NoReverseMatch:
        return []
    return [
        Error(
            "Resonate's SSE routes (poll/<group>/<id>) are mounted but the site is served by "
            "WSGI only (WSGI_APPLICATION set, ASGI_APPLICATION unset): streams deliver nothing",
            hint="serve the site with an ASGI server (uvicorn yoursite.asgi:application) and set "
            'ASGI_APPLICATION = "yoursite.asgi.application" '
            "(docs/how-to/embedding.md#settings-urls-and-asgi).",
            id="resonate.E032",
        )
    ]
