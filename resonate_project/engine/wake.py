"""Wake-ups after a commit that wrote outbox rows.

The database is the source of truth; a wake-up only says "look now". In-process subscribers (the
SSE hub, the embedded push thread) are called directly. Other processes hear through Redis
pub/sub when a Redis URL is configured, and the Celery worker gets a ``resonate.drain`` task when
push messages were written. A lost wake-up only costs latency: the periodic drain and the hub's
fallback poll find every row.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, transaction
from django.utils.module_loading import import_string

from resonate_project.core.conf import resonate_settings

log = logging.getLogger("resonate.notify")

DRAIN_TASK = "resonate.drain"
_subscribers: list[Callable[[bool], None]] = []


class _Kick:
    """One per transaction: registered on commit the first time a row is upserted."""

    def __init__(self) -> None:
        self.push = False

    def __call__(self) -> None:
        kick(push=self.push)


def after_commit(push: bool) -> None:
    for entry in connection.run_on_commit:
        func = entry[1]
        if isinstance(func, _Kick):
            func.push |= push
            return
    k = _Kick()
    k.push = push
    transaction.on_commit(k)


def subscribe(callback: Callable[[bool], None]) -> None:
    """``callback(push)`` runs in the committing thread after every outbox commit."""
    _subscribers.append(callback)


def unsubscribe(callback: Callable[[bool], None]) -> None:
    if callback in _subscribers:
        _subscribers.remove(callback)


def celery_enabled() -> bool:
    return bool(getattr(settings, "CELERY_BROKER_URL", ""))


@cache
def redis_url() -> str:
    url = resonate_settings().NOTIFY_URL or getattr(settings, "CELERY_BROKER_URL", "")
    return url if url.startswith(("redis://", "rediss://", "unix://")) else ""


def channel() -> str:
    """The Redis channel: ``NOTIFY_CHANNEL``, else one per database (README "Settings")."""
    name = resonate_settings().NOTIFY_CHANNEL
    return name or f"resonate:outbox:{settings.DATABASES[DEFAULT_DB_ALIAS]['NAME']}"


def celery_app() -> Any:
    """The app ``resonate.drain`` is sent through: ``CELERY_APP``, else the current one."""
    path = resonate_settings().CELERY_APP
    return import_string(path) if path else current_app


@cache
def _publisher() -> Any:
    import redis

    return redis.Redis.from_url(redis_url(), socket_timeout=2, socket_connect_timeout=2)


def kick(push: bool) -> None:
    for callback in list(_subscribers):
        callback(push)
    if redis_url():
        try:
            _publisher().publish(channel(), b"p" if push else b"s")
        except Exception as exc:  # a lost wake-up costs latency, never a message
            log.warning("wake-up publish failed: %s", exc)
    if push and celery_enabled():
        try:
            # By name: the task lives in the layer above (outbox.tasks, a shared_task).
            celery_app().send_task(DRAIN_TASK, expires=60)
        except Exception as exc:
            log.warning("could not queue resonate.drain: %s", exc)


def listen(callback: Callable[[bool], None]) -> None:
    """Call ``callback`` for every wake-up published by another process (daemon thread)."""
    if not redis_url():
        return

    name = channel()

    def run() -> None:
        import redis

        while True:
            try:
                client = redis.Redis.from_url(redis_url(), socket_connect_timeout=2)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(name)
                for message in pubsub.listen():
                    callback(message.get("data") == b"p")
            except Exception as exc:
                log.warning("wake-up listener lost Redis (%s); reconnecting", exc)
                time.sleep(1)

    threading.Thread(target=run, name="resonate-notify", daemon=True).start()
