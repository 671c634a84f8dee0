"""Wake-ups after a commit that wrote outbox rows, or an early deadline.

The database is the source of truth; a wake-up only says "look now". In-process subscribers (the
SSE hub, the embedded push thread) are called directly. Other processes hear through Redis
pub/sub when a Redis URL is configured, and the Celery worker gets a ``resonate.drain`` task when
push messages were written. A lost wake-up only costs latency: the periodic drain and the hub's
fallback poll find every row.

Deadlines (a promise timeout, a task's retry or lease expiry, a schedule's next run) work the same
way: a commit that writes one sooner than the next tick (``TICK_INTERVAL_MS``) tells the in-process
step runner (``resonate_project.runtime.ticker``), which then sleeps only until it, and with Celery
queues one ``resonate.tick`` for that instant (:func:`plan_tick`; at most one planned tick per
database, earliest first). A later deadline needs no wake-up: the runner looks again within a tick
anyway. A lost one costs at most a tick.
"""

from __future__ import annotations

import datetime
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
TICK_TASK = "resonate.tick"
_subscribers: list[Callable[[bool], None]] = []
_deadline_subscribers: list[Callable[[int], None]] = []


class _Kick:
    """One per transaction: registered on commit the first time a row is upserted or an early
    deadline written."""

    def __init__(self) -> None:
        self.outbox = False
        self.push = False
        self.due_at: int | None = None
        self.now = 0

    def __call__(self) -> None:
        if self.outbox:
            kick(push=self.push)
        if self.due_at is not None:
            deadline_kick(self.due_at, self.now)


def _kick() -> _Kick:
    """This transaction's wake-up, registered on commit the first time it is asked for."""
    for entry in connection.run_on_commit:
        func = entry[1]
        if isinstance(func, _Kick):
            return func
    k = _Kick()
    transaction.on_commit(k)
    return k


def after_commit(push: bool) -> None:
    k = _kick()
    k.outbox = True
    k.push |= push


def deadline(at: int, now: int) -> None:
    """A deadline at ``at`` was written (in the current transaction): if it falls before the next
    tick, wake the step runner for it once the transaction commits."""
    if at >= now + resonate_settings().TICK_INTERVAL_MS:
        return  # the runner looks again before then
    k = _kick()
    if k.due_at is None or at < k.due_at:
        k.due_at, k.now = at, now


def subscribe(callback: Callable[[bool], None]) -> None:
    """``callback(push)`` runs in the committing thread after every outbox commit."""
    _subscribers.append(callback)


def unsubscribe(callback: Callable[[bool], None]) -> None:
    if callback in _subscribers:
        _subscribers.remove(callback)


def subscribe_deadlines(callback: Callable[[int], None]) -> None:
    """``callback(at)`` runs in the committing thread after a commit that wrote a deadline
    ``at`` earlier than the next tick (the in-process step runner)."""
    _deadline_subscribers.append(callback)


def unsubscribe_deadlines(callback: Callable[[int], None]) -> None:
    if callback in _deadline_subscribers:
        _deadline_subscribers.remove(callback)


def celery_enabled() -> bool:
    return bool(getattr(settings, "CELERY_BROKER_URL", ""))


@cache
def redis_url() -> str:
    url = resonate_settings().NOTIFY_URL or getattr(settings, "CELERY_BROKER_URL", "")
    return url if url.startswith(("redis://", "rediss://", "unix://")) else ""


def channel() -> str:
    """The Redis channel: ``NOTIFY_CHANNEL``, else one per database
    (docs/reference/settings.md#notify_channel)."""
    name = resonate_settings().NOTIFY_CHANNEL
    return name or f"resonate:outbox:{settings.DATABASES[DEFAULT_DB_ALIAS]['NAME']}"


def celery_app() -> Any:
    """The app ``resonate.drain`` is sent through: ``CELERY_APP``, else the current one."""
    path = resonate_settings().CELERY_APP
    return import_string(path) if path else current_app


class Breaker:
    """Whether to try a Redis host now. After a failure, nothing is sent for ``backoff_s``
    (doubling up to ``max_s`` while it keeps failing); then one caller at a time tries again.
    A host cut off by the network costs its socket timeout once per back-off, not once per
    request: every wake-up and drain it skips is covered by the 1 s poll and the next tick."""

    def __init__(self, backoff_s: float = 1.0, max_s: float = 8.0) -> None:
        self.first, self.max = backoff_s, max_s
        self.backoff = backoff_s
        self.closed_at = 0.0  # monotonic: when sending may be tried again
        self.trying = False
        self.lock = threading.Lock()

    def allow(self) -> bool:
        with self.lock:
            if self.closed_at == 0.0:
                return True
            if self.trying or time.monotonic() < self.closed_at:
                return False
            self.trying = True  # this caller's attempt decides
            return True

    def succeeded(self) -> None:
        with self.lock:
            self.closed_at, self.trying, self.backoff = 0.0, False, self.first

    def failed(self) -> None:
        with self.lock:
            self.closed_at = time.monotonic() + self.backoff
            self.backoff = min(self.backoff * 2, self.max)
            self.trying = False


_notify_breaker = Breaker()  # the wake-up channel and the tick plan (NOTIFY_URL)
_broker_breaker = Breaker()  # Celery's broker (resonate.drain, resonate.tick)


def _guarded(breaker: Breaker, what: str, send: Callable[[], Any]) -> Any:
    """``send()`` unless ``breaker`` says the host is down; None when skipped or failed."""
    if not breaker.allow():
        log.debug("%s skipped: the host failed recently", what)
        return None
    try:
        result = send()
    except Exception as exc:  # a lost wake-up costs latency, never a message
        breaker.failed()
        log.warning("%s failed: %s", what, exc)
        return None
    breaker.succeeded()
    return result


@cache
def _publisher() -> Any:
    import redis

    return redis.Redis.from_url(redis_url(), socket_timeout=2, socket_connect_timeout=2)


def kick(push: bool) -> None:
    for callback in list(_subscribers):
        callback(push)
    if redis_url():
        message = b"p" if push else b"s"
        _guarded(
            _notify_breaker, "wake-up publish", lambda: _publisher().publish(channel(), message)
        )
    if push and celery_enabled():
        # By name: the task lives in the layer above (outbox.tasks, a shared_task).
        _guarded(
            _broker_breaker,
            "queueing resonate.drain",
            lambda: celery_app().send_task(DRAIN_TASK, expires=60),
        )


def deadline_kick(at: int, now: int) -> None:
    for callback in list(_deadline_subscribers):
        callback(at)
    if celery_enabled():
        plan_tick(at, now)


# --- one planned resonate.tick per database (Celery) ---------------------------------------------

# Set the planned instant unless an earlier (or the same) one is planned. The key lives past the
# instant by two ticks at most: a planned tick that was lost blocks no plan for longer.
_PLAN = """
local cur = redis.call('GET', KEYS[1])
if cur and tonumber(cur) <= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
# A tick starting at ``now`` consumes every plan for ``now`` or before.
_CONSUME = """
local cur = redis.call('GET', KEYS[1])
if cur and tonumber(cur) <= tonumber(ARGV[1]) then redis.call('DEL', KEYS[1]) end
return 0
"""
PLAN_LEAD_MS = 5
_planned_here: list[int] = []  # without Redis: this process's planned instant, if any
_planned_lock = threading.Lock()


def plan_key() -> str:
    return f"resonate:tick:{settings.DATABASES[DEFAULT_DB_ALIAS]['NAME']}"


def _claim_plan(at: int, now: int) -> bool:
    """True if no tick at or before ``at`` is planned yet (and ``at`` is now the plan)."""
    tick = resonate_settings().TICK_INTERVAL_MS
    if redis_url():
        ttl = max(at - now, 0) + 2 * tick
        return bool(_publisher().eval(_PLAN, 1, plan_key(), at, ttl))
    with _planned_lock:
        if _planned_here and now < _planned_here[0] <= at:
            return False
        _planned_here[:] = [at]
        return True


def plan_tick(at: int, now: int) -> None:
    """Queue ``resonate.tick`` for ``at`` (ms) unless a tick at or before it is planned already;
    beat's ticks remain the safety net. ``now``: the caller's clock reading."""
    if at >= now + resonate_settings().TICK_INTERVAL_MS:
        return
    if redis_url():
        claimed = _guarded(_notify_breaker, "planning resonate.tick", lambda: _claim_plan(at, now))
    else:
        claimed = _claim_plan(at, now)
    if not claimed:
        return  # planned already, or Redis is unreachable: the next beat tick does the work
    # Sent a little early: the worker's timer and its hand-off to a pool process take a few
    # ms, and the task waits out what is left of them
    # (resonate_project.runtime.ticker.celery_tick).
    eta = datetime.datetime.fromtimestamp((at - PLAN_LEAD_MS) / 1000, datetime.UTC)
    expires = eta + datetime.timedelta(milliseconds=resonate_settings().TICK_INTERVAL_MS)
    _guarded(
        _broker_breaker,
        "queueing resonate.tick",
        lambda: celery_app().send_task(TICK_TASK, kwargs={"at": at}, eta=eta, expires=expires),
    )


def tick_started(now: int) -> None:
    """A tick runs at ``now``: every tick planned for ``now`` or before is spent."""
    if redis_url():
        _guarded(
            _notify_breaker,
            "updating the planned tick",
            lambda: _publisher().eval(_CONSUME, 1, plan_key(), now),
        )
        return
    with _planned_lock:
        if _planned_here and _planned_here[0] <= now:
            _planned_here.clear()


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
