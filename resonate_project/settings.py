"""Settings for the django-resonate server.

Everything comes from the environment so that one build runs the embedded default (SQLite, no
broker) and the production shape (PostgreSQL, Redis or RabbitMQ) unchanged. Protocol and
operational knobs live in the single ``RESONATE`` namespace; see ``resonate_project/core/conf.py``
for the documented defaults.
"""

import json
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from resonate_project.embed import RESONATE_APPS
from resonate_project.postgresql import url as database_url

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


# Deployment safety (docs/how-to/production.md#deployment). The fixed key is for development on
# loopback: `serve` refuses a non-loopback address with it, and `check --deploy` flags it
# (security.W009).
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or "django-resonate-insecure-development-key"
DEBUG = _env_bool("DJANGO_DEBUG")
# Loopback names unless set: the SDKs and the test suites call 127.0.0.1 or localhost (Django's
# test client adds "testserver"), and a page whose DNS name is rebound to 127.0.0.1 still sends
# that name as Host, so it is refused.
ALLOWED_HOSTS = _env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
CSRF_TRUSTED_ORIGINS = _env_list("DJANGO_CSRF_TRUSTED_ORIGINS")
# HTTPS behind a TLS-terminating proxy; every switch is off unless set, so plain-HTTP clients
# (the SDKs on POST /) are never redirected by default.
SECURE_SSL_REDIRECT = _env_bool("DJANGO_SECURE_SSL_REDIRECT")
SECURE_REDIRECT_EXEMPT = [r"^health$", r"^ready$"]  # load balancers probe over plain HTTP
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_SECURE_HSTS_SECONDS", "0"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = _env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = _env_bool("DJANGO_SECURE_HSTS_PRELOAD")
SESSION_COOKIE_SECURE = _env_bool("DJANGO_SESSION_COOKIE_SECURE")
CSRF_COOKIE_SECURE = _env_bool("DJANGO_CSRF_COOKIE_SECURE")
# "HEADER,value", e.g. "HTTP_X_FORWARDED_PROTO,https". Only behind a proxy that always sets the
# header (overwriting the client's): otherwise any client can claim HTTPS.
_proxy_ssl_header = _env_list("DJANGO_SECURE_PROXY_SSL_HEADER")
if _proxy_ssl_header and len(_proxy_ssl_header) != 2:
    raise ImproperlyConfigured("DJANGO_SECURE_PROXY_SSL_HEADER must be HEADER,value")
SECURE_PROXY_SSL_HEADER = (
    (_proxy_ssl_header[0], _proxy_ssl_header[1]) if _proxy_ssl_header else None
)

INSTALLED_APPS = [
    # Django's admin less django-celery-beat's models (the metronome's rows, not schedules).
    "resonate_project.standalone_admin.StandaloneAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    *RESONATE_APPS,
]

MIDDLEWARE = [
    # A NUL in the path or query, or two credentials: 400 before anything else reads the request.
    "resonate_project.edges.rest.errors.refuse_malformed",
    "django.middleware.security.SecurityMiddleware",
    # /static/ (the admin's CSS and JS): WhiteNoise, staying async (resonate_project/static.py).
    "resonate_project.static.StaticFiles",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# The protocol endpoint is POST /; never redirect it to a slash-suffixed URL.
APPEND_SLASH = False

ROOT_URLCONF = "resonate_project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "resonate_project.wsgi.application"
ASGI_APPLICATION = "resonate_project.asgi.application"

DATABASE_URL = os.environ.get("DATABASE_URL", f"sqlite:///{BASE_DIR / 'resonate.sqlite3'}")
# No per-request health-check ping (a round trip per request): a connection that failed is
# dropped before its next use instead (resonate_project/edges/api.py).
# libpq's multi-host URLs too (host1:port1,host2:port2 with target_session_attrs=read-write), and
# DATABASE_POOLER=transaction behind PgBouncer's transaction mode (resonate_project.postgresql.url).
_db = database_url.parse(DATABASE_URL, os.environ.get("DATABASE_POOLER", "").strip().lower())
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # Embedded default: WAL for concurrent readers, FULL sync so an acknowledged write survives a
    # power cut, IMMEDIATE transactions so concurrent writers queue on the lock instead of failing
    # with "database is locked" when they upgrade from a read.
    # Django's SQLite backend, this process's writers queued on a lock (resonate_project.sqlite).
    _db["ENGINE"] = "resonate_project.sqlite"
    _db["CONN_MAX_AGE"] = 0 if _db["NAME"] == ":memory:" else 600
    _db["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": ("PRAGMA journal_mode=WAL;PRAGMA synchronous=FULL;PRAGMA foreign_keys=ON;"),
    }
    # In memory unless SQLITE_TEST_NAME says otherwise (":memory:" spelled out: pytest-django only
    # recognises Django's own ENGINE string as SQLite when the test name is left unset).
    _db.setdefault("TEST", {})["NAME"] = os.environ.get("SQLITE_TEST_NAME") or ":memory:"
elif _db["ENGINE"] == "django.db.backends.postgresql":
    # Django's PostgreSQL backend, a transaction's BEGIN sent with its first statement (one round
    # trip less per request: resonate_project.postgresql).
    _db["ENGINE"] = "resonate_project.postgresql"
DATABASES = {"default": _db}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# The server serves its static files itself (WhiteNoise, resonate_project/static.py), with or
# without DJANGO_DEBUG: gzip-compressed copies, hashed names cached for a year. `manage.py serve`
# collects them into STATIC_ROOT when they are missing or older than the installed ones; with
# DJANGO_DEBUG they are read from the apps' folders instead.
STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT") or BASE_DIR / "var" / "static")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "resonate_project.static.Storage"},
}

# No REST_FRAMEWORK or SPECTACULAR_SETTINGS: the resource API's views carry their own
# (resonate_project/edges/rest/own.py), as they must inside a host site with settings of its own.

# Celery: the broker decides the production shape; with none configured the embedded server runs
# the same drain and step code in-process (see resonate_project/runtime/embedded.py).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
# The tasks carry no data (a tick, a drain: the database is the source of truth), so a message
# lost with a dying worker costs one interval. Without Redis ack emulation kombu has no unacked
# hash to restore when the connection drops; with it, a Redis restart could make kombu's restore
# raise and the worker exit for good (docs/explanation/reliability.md, finding 5).
# socket timeouts: without them a Redis host cut off by the network (not a refused connection)
# hangs the web process's next publish (resonate.drain after a commit) until the link returns,
# and every request of that process waits behind it (docs/explanation/reliability.md, several
# hosts). 2 s is above the worker's 1 s BRPOP. A drain or a planned tick that cannot be sent is
# not retried: the next tick does its work (engine/wake.py).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "ack_emulation": False,
    "socket_timeout": 2,
    "socket_connect_timeout": 2,
}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_TASK_PUBLISH_RETRY = False
# Installs the metronome (resonate.tick, resonate.drain) as PeriodicTask rows; see
# resonate_project/runtime/beat.py.
CELERY_BEAT_SCHEDULER = "resonate_project.runtime.beat:MetronomeScheduler"
# Celery's Django fixup closes the database connection around every task unless this is set: a
# new PostgreSQL connection per tick and per drain (~5 ms on the bench machine, on a timer's
# critical path). With it, a connection is kept for this many tasks; one that failed is dropped
# by the next task (outbox/tasks.py), as the web tier and the embedded runner do.
CELERY_DB_REUSE_MAX = 1000

RESONATE = {
    "DEBUG": _env_bool("RESONATE_DEBUG"),
    # resonate.drain goes through this project's Celery app (a host's goes through its own).
    "CELERY_APP": "resonate_project.celery.app",
}

# Django's Tasks framework on durable promises (docs/how-to/django-tasks.md#configure-the-backend);
# run the calls with `manage.py resonate worker`. Any queue name; OPTIONS as JSON in
# DJANGO_TASKS_OPTIONS.
TASKS = {
    "default": {
        "BACKEND": "tasks_app.backends.ResonateBackend",
        "QUEUES": [],
        "OPTIONS": json.loads(os.environ.get("DJANGO_TASKS_OPTIONS") or "{}"),
    }
}

# LOG_FORMAT=json: one JSON object per line, plus one line per envelope request
# (docs/how-to/observability.md#logs); plain text otherwise.
LOG_FORMAT = "json" if os.environ.get("LOG_FORMAT", "").strip().lower() == "json" else "text"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "resonate_project.observability.logs.JsonFormatter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            **({"formatter": "json"} if LOG_FORMAT == "json" else {}),
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    # Protocol refusals (4xx) are answers, not incidents.
    "loggers": {
        "django.request": {"level": "ERROR"},
        # One INFO line per pushed message is noise; failures are logged by outbox.push.
        "httpx": {"level": "WARNING"},
    },
}
