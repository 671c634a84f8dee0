"""The ``RESONATE`` settings namespace.

Read through :func:`resonate_settings`, which merges, in increasing precedence, the defaults
below, ``settings.RESONATE`` and ``RESONATE_<KEY>`` environment variables. The merged view is
cached and dropped whenever Django's ``setting_changed`` fires (tests use ``override_settings``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver


@dataclass(frozen=True)
class ResonateSettings:
    # --- protocol, serving and delivery -------------------------------------------------------
    # Protocol (spec ServerConfig). Redispatch cadence of a pending task nobody acquires; must be
    # > 0, or the retry step would be permanently enabled.
    RETRY_TIMEOUT_MS: int = 5000
    # Back-off for a task nobody can run (a deviation, docs/reference/deviations.md): the second
    # and later consecutive task.release of a task without progress (suspended, resumed by what
    # it awaited, or continued) delay its next execute by BASE, then doubling, at most MAX; the
    # first release is redispatched at once, as the spec says. A stream joining the task's group
    # ends the wait. 0 (either) disables the back-off.
    RELEASE_BACKOFF_BASE_MS: int = 1000
    RELEASE_BACKOFF_MAX_MS: int = 60_000
    # Debug surface (C12): off means every debug.* answers 403 and resonate:debug_time is ignored.
    DEBUG: bool = False
    # Threads per web process serving POST / (each holds one database connection); 0 runs the
    # handlers on Django's shared sync thread; -1 (the default): 1 on SQLite, whose writers queue
    # on one lock anyway (a second thread only adds hand-offs), 2 on PostgreSQL.
    WEB_THREADS: int = -1
    # Requests one envelope thread answers in one transaction at most (group commit): what is
    # queued when a thread turns to it, in arrival order, with one COMMIT; 1 gives each request
    # a transaction of its own. A request refused (4xx) writes nothing and leaves the others to
    # commit; a database error runs the batch's requests again, each alone.
    BATCH_MAX: int = 32
    # Request limits. A larger body answers 413 and changes nothing, on every path of the
    # standalone server (POST /, /api/, /poll/, the admin, probes), before authentication.
    MAX_BODY_BYTES: int = 10 * 1024 * 1024
    # The HTTP server ``manage.py serve`` runs (``resonate_project.asgi.HttpProtocol``): a
    # request's line and headers take at most MAX_HEADER_BYTES (else 431) and arrive within
    # HEADER_TIMEOUT_MS of their first byte (of the connection opening, for the first request;
    # else 408 and closed); a connection idle KEEPALIVE_TIMEOUT_MS between requests is closed.
    MAX_HEADER_BYTES: int = 64 * 1024
    HEADER_TIMEOUT_MS: int = 10_000
    KEEPALIVE_TIMEOUT_MS: int = 5_000
    # Searches (not in the spec; shaped like the reference server's).
    SEARCH_LIMIT_DEFAULT: int = 100
    SEARCH_LIMIT_MAX: int = 1000
    # Promises returned in ``preload`` (same resonate:branch) by task.create/acquire/fence.
    PRELOAD_LIMIT: int = 1000
    # Rows an internal step processes per transaction; a full batch is run again at once.
    STEP_BATCH: int = 500
    # Occurrences one schedule may fire per step (catch-up after downtime continues next step).
    SCHEDULE_CATCHUP_BATCH: int = 100
    # Put into the head of every execute message as serverUrl.
    SERVER_URL: str = ""
    # How often every internal step runs at the latest (beat in production, a thread in the
    # embedded server); a deadline sooner than the next tick wakes the runner for it
    # (docs/explanation/time-and-steps.md#who-keeps-time).
    TICK_INTERVAL_MS: int = 1000
    # Outbox delivery (see outbox/). Messages claimed per drain transaction.
    DRAIN_BATCH: int = 100
    # A claimed message not acknowledged within this long is claimed again (a drainer died).
    IN_FLIGHT_MS: int = 30_000
    # HTTP push: per-request timeout, bounded exponential backoff between failed attempts, and
    # parallel requests per drainer.
    PUSH_TIMEOUT_MS: int = 10_000
    PUSH_BACKOFF_BASE_MS: int = 500
    PUSH_BACKOFF_MAX_MS: int = 60_000
    PUSH_CONCURRENCY: int = 128
    # SSE: comment frames keep idle streams open through proxies.
    SSE_KEEPALIVE_MS: int = 15_000
    # A web process holding streams looks for their messages at least this often even if no
    # wake-up reaches it.
    POLL_FALLBACK_MS: int = 1000
    # Where wake-ups travel between processes: a redis:// URL. Empty: CELERY_BROKER_URL when it is
    # Redis; otherwise wake-ups stay in-process (the embedded server) and the fallback polls.
    NOTIFY_URL: str = ""
    # The Redis channel of those wake-ups. Empty: "resonate:outbox:" and the default database's
    # name, so two deployments (or a host's sites) sharing one Redis do not wake each other.
    NOTIFY_CHANNEL: str = ""
    # The Celery app that queues resonate.drain, as a dotted path. Empty: Celery's current app,
    # i.e. the host's own (the standalone server names resonate_project.celery.app).
    CELERY_APP: str = ""

    # --- retention (engine/retention.py; docs/how-to/operating.md) ------------------------------
    # How long settled work is kept, in ms; 0 (the default) keeps it forever. A tree (a root and
    # every promise of its resonate:origin) is deleted whole once all of it settled this long ago
    # and nothing refers to it any more. RETENTION_DJANGO_TASKS_MS applies instead to trees holding
    # a django.tasks job, RETENTION_DEAD_LETTERS_MS to dead-lettered and undeliverable outbox
    # messages.
    RETENTION_MS: int = 0
    RETENTION_DJANGO_TASKS_MS: int = 0
    RETENTION_DEAD_LETTERS_MS: int = 0
    # How often the step runner prunes (after a full tick's steps), how many candidate promises
    # one pass reads, and how long it may go on passing while there is more to read: at the
    # defaults at least one pass a second and up to 25 ms of it: about 500 promises a second on
    # two cores beside a busy web server (make bench growth), 8x what 20 workflows a second write.
    RETENTION_INTERVAL_MS: int = 1000
    RETENTION_BATCH: int = 500
    RETENTION_BUDGET_MS: int = 25

    # --- the trust boundary (docs/explanation/security.md) --------------------------------------
    # Authentication on POST /, /poll/ and /api/: "required" or "off". Unset ("") behaves as off
    # but refuses to serve on a non-loopback address (RESONATE_AUTH=off is the explicit opt-out).
    AUTH: str = ""
    # JWT (compatible with the reference server): a PEM public key (text or a file path), and the
    # issuer and audience to require when set. HS* and "none" are never accepted.
    JWT_PUBLIC_KEY: str = ""
    JWT_ISSUER: str = ""
    JWT_AUDIENCE: str = ""
    # Extra origins (comma-separated, e.g. "https://ops.example.com") whose browser pages may
    # POST /; same-origin requests are always allowed.
    ALLOWED_ORIGINS: str = ""
    # HTTP push destinations (comma-separated hosts, *.wildcards, CIDRs) allowed although they are
    # loopback, link-local, private or metadata addresses (refused by default).
    PUSH_ALLOWED: str = ""
    # Outbound credentials per destination host: JSON {"host": "header value"} sent as
    # Authorization to that host only (settings.RESONATE may give a dict).
    PUSH_CREDENTIALS: str | dict[str, str] = ""
    # After this many failed attempts, or this long after it was written, a push message is
    # dead-lettered: kept, listed, re-sendable, never dropped. 0 disables the bound.
    PUSH_MAX_ATTEMPTS: int = 50
    PUSH_MAX_AGE_MS: int = 7 * 24 * 3600 * 1000
    # A message to a poll://uni@{group}/{id} address whose stream has been connected to no web
    # process for this long leaves the due set: kept as undeliverable (listed, re-sendable and
    # purgeable in the admin and /api/outbox, not counted as due), and due again the moment a
    # stream for that address connects. 0 keeps such messages due forever.
    UNDELIVERABLE_AFTER_MS: int = 600_000
    # Bytes of a push response body read (for the error text) at most.
    PUSH_MAX_RESPONSE_BYTES: int = 4096
    # Requests in flight to one destination host at once (a slow host cannot take every slot).
    PUSH_PER_HOST_CONCURRENCY: int = 64
    # Hard limits; each breach is a 4xx naming the limit, and nothing is written.
    MAX_JSON_DEPTH: int = 64
    MAX_TAGS: int = 128
    MAX_TAG_BYTES: int = 64 * 1024
    MAX_DELAY_CHARS: int = 32
    MAX_SEARCH_TAGS: int = 32
    MAX_SEARCH_RESPONSE_BYTES: int = 8 * 1024 * 1024
    MAX_LISTENERS_PER_PROMISE: int = 1000
    # Items in one request's list (task.heartbeat tasks, task.suspend actions): a heartbeat
    # names every task its worker holds, so generously above any worker's concurrency.
    MAX_LIST_ITEMS: int = 10_000
    # SSE: streams per web process (then 503), and how long a frame written to a stream stays
    # claimed for it: if the stream closes within this window the frame is delivered again.
    SSE_MAX_STREAMS: int = 1000
    # Of those, how many one credential may hold (then 429), so one tenant cannot take every slot:
    # -1 (the default) is half of SSE_MAX_STREAMS, 0 no share. Counted per web process.
    SSE_MAX_STREAMS_PER_CREDENTIAL: int = -1
    SSE_ACK_GRACE_MS: int = 15_000
    # A stream ends (cleanly, once what it wrote is confirmed) after this long, and its client
    # reconnects: resonate-sdk 0.8.1 reads its stream under aiohttp's default 300 s total timeout
    # and does not survive it, so a stream older than that leaves a worker deaf. 0: no limit.
    SSE_MAX_AGE_MS: int = 240_000
    # --- observability (docs/how-to/observability.md) -------------------------------------------
    # Prometheus metrics: collected unless off; also served on their own port when METRICS_PORT
    # is set (like the reference server's :9090), besides /metrics on the web port.
    METRICS: bool = True
    METRICS_PORT: int = 0
    # Where the METRICS_PORT listener binds. It asks for no credential: keep it off public networks.
    METRICS_HOST: str = "127.0.0.1"


# Read from the settings only, never from the environment: the debug surface (debug.reset deletes
# everything) is switched on by the site's own settings (the standalone server's settings read
# RESONATE_DEBUG into them).
_SETTINGS_ONLY = frozenset({"DEBUG"})
# Settings of earlier releases that no longer do anything: accepted (a site that still names one
# keeps starting) and ignored, with a warning in the log.
RETIRED = {
    "LOOP_CONNECTIONS": "every request now runs on the envelope's threads, in batches (BATCH_MAX)",
}


def env_variable(name: str) -> str | None:
    """The environment variable that overrides setting ``name``, or None when none does."""
    return None if name in _SETTINGS_ONLY else f"RESONATE_{name}"


def _coerce(raw: str, like: Any) -> Any:
    """An environment variable's text as its setting's type: a bool is on for 1, true, yes or on
    (any case) and off for anything else; an int is a decimal integer (anything else is system
    check resonate.E000); any other setting takes the text as it is."""
    if isinstance(like, bool):
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    if isinstance(like, int):
        return int(raw)
    return raw


@cache
def resonate_settings() -> ResonateSettings:
    configured: dict[str, Any] = dict(getattr(settings, "RESONATE", {}) or {})
    defaults = ResonateSettings()
    values: dict[str, Any] = {}
    for f in fields(ResonateSettings):
        value = configured.get(f.name, getattr(defaults, f.name))
        variable = env_variable(f.name)
        env = os.environ.get(variable) if variable else None
        if env is not None:
            value = _coerce(env, getattr(defaults, f.name))
        values[f.name] = value
    for name in sorted(set(configured) & set(RETIRED)):
        logging.getLogger("resonate.settings").warning(
            "RESONATE[%r] is retired and ignored: %s", name, RETIRED[name]
        )
    unknown = set(configured) - {f.name for f in fields(ResonateSettings)} - set(RETIRED)
    if unknown:
        raise ValueError(f"unknown RESONATE settings: {', '.join(sorted(unknown))}")
    return ResonateSettings(**values)


@receiver(setting_changed)
def _reset(setting: str, **_: Any) -> None:
    if setting == "RESONATE":
        resonate_settings.cache_clear()
