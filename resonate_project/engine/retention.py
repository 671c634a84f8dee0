"""Retention: settled work deleted once it is older than the policy (docs/how-to/operating.md).

The unit is a *tree*: a root and every promise whose ``resonate:origin`` names it (the SDKs' call
tree; a promise with no origin is a tree of one). A tree is deleted whole, in one transaction,
and only when

- every promise in it is settled, at least the window ago (the Django tasks window when one of
  its tasks is a ``django.tasks`` job, else the promises window; a window of 0 keeps them);
- every task of it is fulfilled;
- nothing else refers to any of its promises: no callback (either side), no listener, no
  ``unblock`` still owed (due, undeliverable or dead-lettered: an operator may still resend it),
  and no schedule's last occurrence (a schedule fired again after a restore would otherwise
  create it anew). An ``execute`` left for one of its tasks can never be acquired (they are all
  fulfilled) and is deleted with the tree;
- every promise of it could be locked at once (``SKIP LOCKED``): a tree a request is using now
  is left for a later pass, so retention never waits on a lock a request holds.

A pass reads at most ``batch`` candidate promises in settled order from a cursor the runner
keeps, so a tree that must stay (a child still awaited, a listener never drained) never holds
up the ones after it; at the end it starts over. Dead-lettered and undeliverable messages older
than their own window are deleted by the same pass, and the set-aside entries of deleted rows
with them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.lookups import Exact

from outbox.models import Message, Quarantine
from promises.models import Callback, Listener, Promise, PromiseState
from resonate_project.core.conf import resonate_settings
from resonate_project.core.schedules import expand
from resonate_project.core.tags import ORIGIN, SCHEDULE
from resonate_project.observability import metrics
from schedules.models import Schedule
from tasks_app.models import Job, Task, TaskState

log = logging.getLogger("resonate.retention")


@dataclass(frozen=True)
class Policy:
    """How long settled work is kept, in ms; 0 keeps it forever."""

    promises_ms: int = 0
    django_tasks_ms: int = 0
    dead_letters_ms: int = 0

    @classmethod
    def from_settings(cls) -> Policy:
        s = resonate_settings()
        return cls(s.RETENTION_MS, s.RETENTION_DJANGO_TASKS_MS, s.RETENTION_DEAD_LETTERS_MS)

    @property
    def off(self) -> bool:
        return not (self.promises_ms or self.django_tasks_ms or self.dead_letters_ms)


@dataclass(frozen=True)
class Cursor:
    """Where the next pass goes on: the settled run after ``settled`` (settled_at, id), the run
    of timed-out pending promises after id ``expired``; None: at the start."""

    settled: tuple[int, str] | None = None
    expired: str | None = None


@dataclass
class Pruned:
    """What a pass deleted (or, dry, would delete)."""

    trees: int = 0
    promises: int = 0
    tasks: int = 0
    django_tasks: int = 0
    dead_letters: int = 0
    kept: int = 0  # trees looked at and kept: something still refers to them, or too young
    cursor: Cursor | None = None  # where the next pass goes on
    more: bool = False  # a run had more candidates than the pass read

    def add(self, other: Pruned) -> None:
        self.trees += other.trees
        self.promises += other.promises
        self.tasks += other.tasks
        self.django_tasks += other.django_tasks
        self.dead_letters += other.dead_letters
        self.kept += other.kept

    def counts(self) -> dict[str, int]:
        return {
            "trees": self.trees,
            "promises": self.promises,
            "tasks": self.tasks,
            "django_tasks": self.django_tasks,
            "dead_letters": self.dead_letters,
        }


def prune_pass(
    now: int,
    policy: Policy,
    *,
    batch: int,
    cursor: Cursor | None = None,
    dry_run: bool = False,
) -> Pruned:
    """One bounded pass: at most ``batch`` candidates of each run after ``cursor``, each tree in
    its own transaction. Returns the counts and the cursor for the next pass.

    The two runs: settled promises by (settled_at, id), and pending ones whose timeout passed by
    id (timed out lazily: a promise nothing arms a timer for, C1, stays pending in its row and
    reads as timed out), over the pending rows' index. A run that reaches its end starts over at
    the next pass; ``more`` says whether either had more to read."""
    done = Pruned()
    windows = [w for w in (policy.promises_ms, policy.django_tasks_ms) if w > 0]
    if windows:
        older = now - min(windows)
        cursor = cursor or Cursor()
        settled = Promise.objects.filter(settled_at__isnull=False, settled_at__lt=older)
        if cursor.settled is not None:
            at, pk = cursor.settled
            settled = settled.filter(Q(settled_at__gt=at) | Q(settled_at=at, id__gt=pk))
        rows = list(
            settled.annotate(origin=_origin())
            .order_by("settled_at", "id")
            .values_list("settled_at", "id", "origin")[:batch]
        )
        expired = Promise.objects.filter(state=PromiseState.PENDING, timeout_at__lt=older)
        if cursor.expired is not None:
            expired = expired.filter(id__gt=cursor.expired)
        late = list(
            expired.annotate(origin=_origin()).order_by("id").values_list("id", "origin")[:batch]
        )
        found = [(pk, origin) for _, pk, origin in rows] + late
        done.cursor = Cursor(
            settled=(rows[-1][0] or 0, rows[-1][1]) if len(rows) == batch else None,
            expired=late[-1][0] if len(late) == batch else None,
        )
        done.more = len(rows) == batch or len(late) == batch
        for key in dict.fromkeys(origin or pk for pk, origin in found):
            done.add(_prune_tree(key, now, policy, dry_run))
    if policy.dead_letters_ms > 0:
        done.dead_letters = _prune_dead_letters(now - policy.dead_letters_ms, batch, dry_run)
        done.more = done.more or done.dead_letters == batch
    if not dry_run:
        metrics.record_pruned(done.counts())
    return done


def prune(
    now: int, policy: Policy, *, batch: int, dry_run: bool = False, passes: int | None = None
) -> Pruned:
    """Passes until both runs have read to their end (everything looked at once), or ``passes``
    of them: ``manage.py resonate prune``. A dry run reads each candidate once, deleting
    nothing, so its counts are what one real prune would delete."""
    total, cursor, n = Pruned(), None, 0
    while True:
        one = prune_pass(now, policy, batch=batch, cursor=cursor, dry_run=dry_run)
        total.add(one)
        cursor, n = one.cursor, n + 1
        if not one.more or (passes is not None and n >= passes):
            total.cursor, total.more = cursor, one.more
            return total


def _origin() -> KeyTextTransform:
    """A promise's ``resonate:origin`` tag: the expression index ``promise_origin`` holds it."""
    return KeyTextTransform(ORIGIN, "tags")


def _members(key: str) -> Any:
    # Exact() itself: the ``origin=key`` lookup would compare JSON on SQLite (the key as JSON)
    return Promise.objects.filter(Q(id=key) | Q(Exact(_origin(), Value(key))))


def _prune_tree(key: str, now: int, policy: Policy, dry_run: bool) -> Pruned:
    out = Pruned()
    with transaction.atomic():
        every = list(_members(key).values_list("id", flat=True))
        locked = list(
            _members(key)
            .select_for_update(skip_locked=True)
            .values_list("id", "state", "settled_at", "timeout_at", "tags")
        )
        if not every or len(locked) != len(every):
            out.kept = 1  # in use right now (or gone): a later pass
            return out
        ids = [pk for pk, *_ in locked]
        jobs = Job.objects.filter(task__promise_id__in=ids).count()
        window = policy.django_tasks_ms if jobs else policy.promises_ms
        if window <= 0 or not _settled_before(locked, now - window) or _referred_to(ids, locked):
            out.kept = 1
            return out
        tasks = Task.objects.filter(promise_id__in=ids)
        out.trees, out.promises, out.tasks, out.django_tasks = 1, len(ids), tasks.count(), jobs
        if dry_run:
            return out
        Quarantine.objects.filter(row__in=ids).delete()
        Message.objects.filter(kind="execute", task_id__in=ids).delete()
        Job.objects.filter(task__promise_id__in=ids).delete()
        tasks.delete()
        Promise.objects.filter(id__in=ids).delete()
    return out


def _settled_before(rows: list[tuple[Any, ...]], instant: int) -> bool:
    """Every promise settled before ``instant``; a pending one counts as settled (timed out) at
    its timeout."""
    for _, state, settled_at, timeout_at, _ in rows:
        at = timeout_at if state == PromiseState.PENDING else settled_at
        if at is None or at >= instant:
            return False
    return True


def _referred_to(ids: list[str], rows: list[tuple[Any, ...]]) -> bool:
    """Something outside the tree still counts on one of ``ids``."""
    if Task.objects.filter(promise_id__in=ids).exclude(state=TaskState.FULFILLED).exists():
        return True
    if Callback.objects.filter(Q(awaited_id__in=ids) | Q(awaiter_id__in=ids)).exists():
        return True
    if Listener.objects.filter(awaited_id__in=ids).exists():
        return True
    if _unblocks_owed(ids):
        return True
    for *_, tags in rows:
        schedule_id = (tags or {}).get(SCHEDULE)
        if schedule_id is None:
            continue
        s = Schedule.objects.filter(id=schedule_id).first()
        last = s.last_run_at if s is not None else None
        if s is not None and last is not None and expand(s.promise_id, s.id, last) in ids:
            return True
    return False


def _unblocks_owed(ids: list[str]) -> bool:
    """An unblock still owed to a listener of one of ``ids`` (due, undeliverable or dead-lettered;
    keyed ``<promise id>:notify:<address>``: a prefix match, which on SQLite ignores case and so
    can only keep a tree longer). Executes do not count: every task of the tree is fulfilled, so
    an execute left for one can never be acquired, and it goes with the tree."""
    for i in range(0, len(ids), 100):
        notify = Q()
        for pk in ids[i : i + 100]:
            notify |= Q(key__startswith=f"{pk}:notify:")
        if Message.objects.filter(notify).exists():
            return True
    return False


def _prune_dead_letters(before: int, batch: int, dry_run: bool) -> int:
    """Dead letters, and messages undeliverable (their stream never came back), older than the
    window."""
    old = Q(dead_at__isnull=False, dead_at__lt=before) | Q(
        undeliverable_at__isnull=False, undeliverable_at__lt=before
    )
    with transaction.atomic():
        keys = list(
            Message.objects.filter(old)
            .select_for_update(skip_locked=True)
            .order_by("created_at")
            .values_list("key", flat=True)[:batch]
        )
        if not dry_run and keys:
            Message.objects.filter(key__in=keys).delete()
    return len(keys)


class _Progress:
    """This process's place in the settled promises, and when it last pruned."""

    last_at: int | None = None
    cursor: Cursor | None = None


def tick(now: int) -> Pruned | None:
    """The step runner's call after a full pass: one bounded pass every RETENTION_INTERVAL_MS
    (None when it is not time yet, or no window is set)."""
    policy = Policy.from_settings()
    s = resonate_settings()
    if policy.off or (
        _Progress.last_at is not None and now - _Progress.last_at < s.RETENTION_INTERVAL_MS
    ):
        return None
    _Progress.last_at = now
    done = prune_pass(now, policy, batch=s.RETENTION_BATCH, cursor=_Progress.cursor)
    _Progress.cursor = done.cursor
    if done.trees or done.dead_letters:
        log.info("retention: %s", done.counts())
    return done
