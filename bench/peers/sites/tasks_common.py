"""What the three peer sites share (each settings module starts with ``from tasks_common import
*``): the database from ``DATABASE_URL``, configured as the project's own settings configure
theirs on PostgreSQL (persistent connections for 600 s, no health check per use), so no backend
pays for a connection per task that another does not; no debug (no query log growing per task)."""

import os
from typing import Any
from urllib.parse import unquote, urlsplit


def database(url: str) -> dict[str, Any]:
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")),
        "USER": unquote(parts.username or "postgres"),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or 5432),
        "CONN_MAX_AGE": 600,
        "CONN_HEALTH_CHECKS": False,
    }


DEBUG = False
SECRET_KEY = "bench-peers-not-secret"
ALLOWED_HOSTS = ["127.0.0.1"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": database(os.environ["DATABASE_URL"])}
