"""Task transitions shared by handlers and internal steps (spec §1.2, §5.8).

Callers hold the promise row lock of the task's id (see ``engine/locks.py``). Each function
applies one edge of the task state machine and saves; none reads a clock.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from django.db import transaction

from promises.models import Promise
from resonate_project.core.addresses import is_claimed_from_database, parse_poll
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import is_live, viewed_task_state
from resonate_project.core.tags import DELAY, parse_delay
from resonate_project.core.wire.promises import later
from resonate_project.engine import outbox, rows, wake
from tasks_app.models import Task, TaskState

if TYPE_CHECKING:
    from resonate_project.engine.effects import Effects

_LEASE_FIELDS = ["state", "pid", "ttl", "expires_at", "retry_at", "resumes"]
# Task ids per statement (an IN list SQLite and PostgreSQL both take).
_ID_CHUNK = 500


def first_dispatch_at(p: Promise, now: int) -> int:
    """When a task born pending is first due: ``max(resonate:delay, now)``.

    A delay at or past the promise's deadline means the task is never dispatched and dies timed
    out, so the instant is capped at the deadline (which also keeps any delay storable). A timer
    that is also targeted (the Python SDK's ``ctx.sleep``) is never dispatched either: nothing
    runs it, and its deadline settlement fulfils it. Nor is a task whose target is claimed from
    the database (``django-tasks://``): its worker finds it by querying, so its retry timer is
    parked at the deadline, where it only applies the timeout.
    """
    if p.timer or is_claimed_from_database(p.target):
        return p.timeout_at
    delay = p.tags.get(DELAY)
    due = max(parse_delay(delay), now) if delay is not None else now
    return min(due, p.timeout_at)


def born_pending(p: Promise, now: int, fx: Effects) -> Task:
    task = Task(promise=p, state=TaskState.PENDING, version=0, retry_at=first_dispatch_at(p, now))
    rows.insert(task)
    fx.became_pending(task, p)
    if task.retry_at is not None and task.retry_at > now:  # a delay, or a timer's deadline
        wake.deadline(task.retry_at, now)
    return task


def born_acquired(p: Promise, pid: str, ttl: int, now: int) -> Task:
    expires_at = later(now, ttl)
    task = Task(
        promise=p,
        state=TaskState.ACQUIRED,
        version=1,
        pid=pid,
        ttl=ttl,
        expires_at=expires_at,
        last_pid=pid,
    )
    rows.insert(task)
    wake.deadline(min(expires_at, p.timeout_at), now)  # the promise was born in this transaction
    return task


def born_fulfilled(p: Promise) -> Task:
    task = Task(promise=p, state=TaskState.FULFILLED, version=0)
    rows.insert(task)
    return task


def acquire(t: Task, pid: str, ttl: int, now: int) -> None:
    t.state = TaskState.ACQUIRED
    t.version += 1
    expires_at = later(now, ttl)
    t.pid, t.ttl, t.expires_at = pid, ttl, expires_at
    t.last_pid = pid
    t.retry_at = None
    t.resumes = []
    rows.update(t, [*_LEASE_FIELDS, "version", "last_pid"])
    wake.deadline(expires_at, now)


def make_pending(
    t: Task,
    p: Promise,
    now: int,
    fx: Effects,
    *,
    progress: bool = False,
    delay: int = 0,
    also: Sequence[str] = (),
) -> None:
    """Enter pending (release, continue, lease expiry): due at once (or after ``delay``, a
    release's back-off), version and resumes kept; ``also``: more fields the caller changed.
    ``progress``: the release count restarts (an operator's continue)."""
    t.state = TaskState.PENDING
    t.pid = t.ttl = t.expires_at = None
    t.retry_at = later(now, delay)
    fields = [*_LEASE_FIELDS, *also]
    if progress and t.release_count:
        t.release_count = 0
        fields = [*fields, "release_count"]
    rows.update(t, fields)
    fx.became_pending(t, p)
    if delay:
        wake.deadline(t.retry_at, now)


def release_backoff_ms(releases: int) -> int:
    """How long the ``releases``-th consecutive release without progress delays the next
    execute: none for the first (the spec's redispatch at once: a worker shutting down hands its
    task on), then ``RELEASE_BACKOFF_BASE_MS`` doubling up to ``RELEASE_BACKOFF_MAX_MS``; 0 when
    either is 0 (no back-off)."""
    conf = resonate_settings()
    base, cap = conf.RELEASE_BACKOFF_BASE_MS, conf.RELEASE_BACKOFF_MAX_MS
    if base <= 0 or cap <= 0 or releases < 2:
        return 0
    return min(base * 2 ** min(releases - 2, 62), cap)


def release(t: Task, p: Promise, now: int, fx: Effects) -> None:
    """T-08: back to pending, recorded (release count, when), and due after the back-off for a
    task that keeps being released without progress (a deviation: the spec redispatches at once;
    docs/reference/deviations.md). A task claimed from the database keeps its own retry policy."""
    t.release_count += 1
    t.last_release_at = now
    delay = 0 if is_claimed_from_database(p.target) else release_backoff_ms(t.release_count)
    make_pending(t, p, now, fx, delay=delay, also=["release_count", "last_release_at"])


def redispatch_backed_off(groups: Collection[str], now: int) -> int:
    """Make the tasks waiting out a release back-off due now if they target one of ``groups``
    (``poll://any@{group}``, with or without an id): a stream joined the group, which may be a
    worker that has the function. Their release count stays (a worker that lacks it too releases
    into a longer back-off). The tasks in back-off are few (the ``task_backed_off`` index), so
    they are read and matched here rather than by a condition per group. Returns how many."""
    if not groups:
        return 0
    wanted = set(groups)
    waiting = Task.objects.filter(
        state=TaskState.PENDING, release_count__gte=2, retry_at__gt=now
    ).values_list("pk", "promise__target")
    ids = []
    for pk, target in waiting:
        poll = parse_poll(target or "")
        if poll is not None and poll.mode == "any" and poll.group in wanted:
            ids.append(pk)
    n = 0
    with transaction.atomic():
        for i in range(0, len(ids), _ID_CHUNK):
            n += Task.objects.filter(
                pk__in=ids[i : i + _ID_CHUNK], state=TaskState.PENDING, retry_at__gt=now
            ).update(retry_at=now)
        if n:
            wake.deadline(now, now)
    return n


def fulfil(t: Task) -> None:
    """The coupled write (spec §1.7): the task of a settled promise is fulfilled with it."""
    t.state = TaskState.FULFILLED
    t.pid = t.ttl = t.expires_at = t.retry_at = None
    t.resumes = []
    rows.update(t, _LEASE_FIELDS)


def suspend(t: Task) -> None:
    """Suspended: progress, so the release count restarts."""
    t.state = TaskState.SUSPENDED
    t.pid = t.ttl = t.expires_at = t.retry_at = None
    t.resumes = []
    t.release_count = 0
    rows.update(t, [*_LEASE_FIELDS, "release_count"])


def halt(t: Task) -> None:
    t.state = TaskState.HALTED
    t.pid = t.ttl = t.expires_at = t.retry_at = None
    rows.update(t, _LEASE_FIELDS)


def extend_lease(t: Task, now: int) -> None:
    """A heartbeat. Not progress for the release back-off: the SDKs heartbeat on a timer every
    task they hold, one they are about to release for want of its function included."""
    assert t.ttl is not None
    expires_at = later(now, t.ttl)
    t.expires_at = expires_at
    rows.update(t, ["expires_at"])
    wake.deadline(expires_at, now)


def resume(t: Task, p: Promise, awaited_id: str, now: int, fx: Effects) -> None:
    """R4 ``resumeOne``: wake a suspended awaiter or record the resume on an active one.

    The awaiter is viewed through its own projection first, so an awaiter whose own deadline has
    passed reads as fulfilled and is never woken (C6: timeout always wins).
    """
    state = viewed_task_state(t, p, now)
    if state == TaskState.SUSPENDED:
        t.state = TaskState.PENDING
        t.resumes = [awaited_id]
        t.retry_at = now
        t.release_count = 0  # resumed: progress
        rows.update(t, ["state", "resumes", "retry_at", "release_count"])
        fx.became_pending(t, p)
    elif state != TaskState.FULFILLED and awaited_id not in t.resumes:
        # pending, acquired or halted: something already drives the task; record the resume.
        t.resumes = [*t.resumes, awaited_id]
        rows.update(t, ["resumes"])


def dispatch(t: Task, p: Promise, now: int) -> bool:
    """R6 for one task: re-arm the retry and upsert ``execute`` with the current version.

    Gated on the projected promise (C5): no dispatch for the dead. An empty target names no
    address, so the retry is re-armed but no message is written. A target claimed from the
    database gets no message either, and its retry is parked at the deadline (see
    :func:`first_dispatch_at`), so the sweep does not revisit a task its worker will claim.
    """
    if t.state != TaskState.PENDING or t.retry_at is None or t.retry_at > now:
        return False
    if not is_live(p, now):
        return False
    if is_claimed_from_database(p.target):
        t.retry_at = p.timeout_at
        rows.update(t, ["retry_at"])
        return True
    retry_at = later(now, resonate_settings().RETRY_TIMEOUT_MS)
    t.retry_at = retry_at
    rows.update(t, ["retry_at"])
    wake.deadline(retry_at, now)
    if p.target:
        outbox.execute(p.id, t.version, p.target, now)
    return True
