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
import time
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.lookups import In

from outbox.models import Message, Quarantine, RetentionTotal
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
    expired: bool = True,
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
        late: list[tuple[str, str | None]] = []
        if expired:
            pending = Promise.objects.filter(state=PromiseState.PENDING, timeout_at__lt=older)
            if cursor.expired is not None:
                pending = pending.filter(id__gt=cursor.expired)
            late = list(
                pending.annotate(origin=_origin())
                .order_by("id")
                .values_list("id", "origin")[:batch]
            )
        found = [(pk, origin) for _, pk, origin in rows] + late
        done.cursor = Cursor(
            settled=(rows[-1][0] or 0, rows[-1][1]) if len(rows) == batch else None,
            expired=late[-1][0]
            if len(late) == batch
            else (cursor.expired if not expired else None),
        )
        done.more = len(rows) == batch or len(late) == batch
        keys = list(dict.fromkeys(origin or pk for pk, origin in found))
        for part in _chunks(keys, 100):
            done.add(_prune_trees(part, now, policy, dry_run))
    if policy.dead_letters_ms > 0:
        done.dead_letters = _prune_dead_letters(now - policy.dead_letters_ms, batch, dry_run, now)
        done.more = done.more or done.dead_letters == batch
    if not dry_run:
        metrics.record_pruned(done.counts())
    return done


def _add_totals(counts: dict[str, int], now: int) -> None:
    """What a transaction deleted, added to the totals every runner shares (the overview shows
    them)."""
    for kind, n in counts.items():
        if not n:
            continue
        add = RetentionTotal.objects.filter(kind=kind)
        if not add.update(rows=F("rows") + n, last_at=now):
            _, created = RetentionTotal.objects.get_or_create(
                kind=kind, defaults={"rows": n, "last_at": now}
            )
            if not created:  # another runner made the row meanwhile
                add.update(rows=F("rows") + n, last_at=now)


def overview(now: int) -> dict[str, Any]:
    """The overview's retention figures: the policy, the oldest settled promise (retention keeps
    up while it is about a window old) and the totals deleted."""
    policy = Policy.from_settings()
    oldest = (
        Promise.objects.filter(settled_at__isnull=False)
        .order_by("settled_at")
        .values_list("settled_at", flat=True)
        .first()
    )
    totals = {t.kind: t for t in RetentionTotal.objects.all()}
    last = max((t.last_at for t in totals.values() if t.last_at is not None), default=None)
    return {
        "policy": policy,
        "oldest_age": None if oldest is None else max(now - oldest, 0),
        "behind": bool(policy.promises_ms)
        and oldest is not None
        and now - oldest > 2 * policy.promises_ms,
        "totals": {kind: totals[kind].rows if kind in totals else 0 for kind in Pruned().counts()},
        "last_at": last,
    }


def prune(
    now: int,
    policy: Policy,
    *,
    batch: int,
    dry_run: bool = False,
    passes: int | None = None,
    pace: float = 0.0,
) -> Pruned:
    """Passes until both runs have read to their end (everything looked at once), or ``passes``
    of them: ``manage.py resonate prune``. A dry run reads each candidate once, deleting
    nothing, so its counts are what one real prune would delete. ``pace``: after each pass, wait
    that many times as long as the pass took (1.0: prune half the time), so requests keep the
    database while a large backlog goes."""
    total, cursor, n = Pruned(), None, 0
    while True:
        started = time.monotonic()
        one = prune_pass(now, policy, batch=batch, cursor=cursor, dry_run=dry_run)
        total.add(one)
        cursor, n = one.cursor, n + 1
        if not one.more or (passes is not None and n >= passes):
            total.cursor, total.more = cursor, one.more
            return total
        if pace > 0:
            time.sleep(pace * (time.monotonic() - started))


def _origin() -> KeyTextTransform:
    """A promise's ``resonate:origin`` tag: the expression index ``promise_origin`` holds it."""
    return KeyTextTransform(ORIGIN, "tags")


def _chunks(ids: list[str], size: int = 500) -> Any:
    for i in range(0, len(ids), size):
        yield ids[i : i + size]


def _members(keys: list[str]) -> Any:
    """Every promise of the trees ``keys``: the roots and the promises of their origins. (The
    lookup object itself: ``origin__in`` would compare JSON values on SQLite.)"""
    return Promise.objects.filter(Q(id__in=keys) | Q(In(_origin(), keys))).annotate(
        origin=_origin()
    )


def _prune_trees(keys: list[str], now: int, policy: Policy, dry_run: bool) -> Pruned:
    """The trees ``keys``, in one transaction: each is deleted whole if it may go, else kept."""
    out = Pruned()
    with transaction.atomic():
        wanted = set(keys)
        every: dict[str, set[str]] = {}
        for pk, origin in _members(keys).values_list("id", "origin"):
            key = origin or pk  # a root named by another origin belongs to that tree, not this
            if key in wanted:
                every.setdefault(key, set()).add(pk)
        rows = {
            pk: (state, settled_at, timeout_at, tags)
            for pk, state, settled_at, timeout_at, tags in _members(keys)
            .select_for_update(skip_locked=True)
            .values_list("id", "state", "settled_at", "timeout_at", "tags")
        }
        ids = list(rows)
        held = _held(ids, rows)
        jobs = set(Job.objects.filter(task__promise_id__in=ids).values_list("task_id", flat=True))
        going: list[str] = []
        for tree in every.values():
            # In use right now (a member locked by a request), or anything counts on it: kept.
            if not tree <= rows.keys() or tree & held:
                out.kept += 1
                continue
            window = policy.django_tasks_ms if tree & jobs else policy.promises_ms
            if window <= 0 or not _settled_before([rows[m] for m in tree], now - window):
                out.kept += 1
                continue
            out.trees += 1
            out.django_tasks += len(tree & jobs)
            going.extend(tree)
        out.promises = len(going)
        out.tasks = Task.objects.filter(promise_id__in=going).count() if going else 0
        if going and not dry_run:
            for part in _chunks(going):
                Quarantine.objects.filter(row__in=part).delete()
                _delete(Message, "task_id", part, kind="execute")
                _delete(Job, "id", part)
                _delete(Task, "id", part)
                _delete(Promise, "id", part)
            _add_totals(out.counts(), now)  # committed with the deletes
    return out


def _delete(model: Any, column: str, ids: list[str], kind: str | None = None) -> None:
    """``DELETE … WHERE column IN ids``: one statement, without the ORM's cascade collector
    (whose reads would find nothing: a tree that goes has no callbacks or listeners)."""
    qn = connection.ops.quote_name
    marks = ", ".join(["%s"] * len(ids))
    sql = f"DELETE FROM {qn(model._meta.db_table)} WHERE {qn(column)} IN ({marks})"
    params: list[Any] = list(ids)
    if kind is not None:
        sql += f" AND {qn('kind')} = %s"
        params.append(kind)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _settled_before(rows: list[tuple[Any, ...]], instant: int) -> bool:
    """Every promise settled before ``instant``; a pending one counts as settled (timed out) at
    its timeout."""
    for state, settled_at, timeout_at, _ in rows:
        at = timeout_at if state == PromiseState.PENDING else settled_at
        if at is None or at >= instant:
            return False
    return True


def _held(ids: list[str], rows: dict[str, tuple[Any, ...]]) -> set[str]:
    """The promises of ``ids`` something still counts on: a task not fulfilled, a callback
    (either side), a listener, an unblock still owed (due, undeliverable or dead-lettered: an
    operator may resend it), or being a schedule's last occurrence. An execute does not count:
    once every task of a tree is fulfilled, one left for it can never be acquired."""
    held: set[str] = set()
    for part in _chunks(ids):
        held |= set(
            Task.objects.filter(promise_id__in=part)
            .exclude(state=TaskState.FULFILLED)
            .values_list("promise_id", flat=True)
        )
        for awaited, awaiter in Callback.objects.filter(
            Q(awaited_id__in=part) | Q(awaiter_id__in=part)
        ).values_list("awaited_id", "awaiter_id"):
            held |= {awaited, awaiter}
        held |= set(
            Listener.objects.filter(awaited_id__in=part).values_list("awaited_id", flat=True)
        )
        held |= set(
            Message.objects.filter(kind="unblock")
            .annotate(about=KeyTextTransform("id", "promise"))
            .filter(In(KeyTextTransform("id", "promise"), part))
            .values_list("about", flat=True)
        )
    schedules: dict[str, list[str]] = {}
    for pk, (*_, tags) in rows.items():
        schedule_id = (tags or {}).get(SCHEDULE)
        if schedule_id is not None:
            schedules.setdefault(schedule_id, []).append(pk)
    for sched in Schedule.objects.filter(id__in=list(schedules)):
        if sched.last_run_at is not None:
            last = expand(sched.promise_id, sched.id, sched.last_run_at)
            if last in schedules[sched.id]:
                held.add(last)
    return held


def _prune_dead_letters(before: int, batch: int, dry_run: bool, now: int) -> int:
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
            _add_totals({"dead_letters": len(keys)}, now)
    return len(keys)


class _Progress:
    """This process's place in the candidates, and when it last pruned and last read the
    timed-out pending promises."""

    last_at: int | None = None
    expired_at: int | None = None
    cursor: Cursor | None = None


# The run of timed-out pending promises reads the pending rows in id order (no index orders
# them by timeout); the step runner reads it at most this often.
EXPIRED_EVERY_MS = 60_000


def tick(now: int) -> Pruned | None:
    """The step runner's call after a full pass: every RETENTION_INTERVAL_MS, passes while
    there is more to read, for up to RETENTION_BUDGET_MS (None when it is not time yet, or no
    window is set). Several runners may prune at once: each tree is locked with SKIP LOCKED."""
    policy = Policy.from_settings()
    s = resonate_settings()
    if policy.off or (
        _Progress.last_at is not None and now - _Progress.last_at < s.RETENTION_INTERVAL_MS
    ):
        return None
    _Progress.last_at = now
    expired = _Progress.expired_at is None or now - _Progress.expired_at >= EXPIRED_EVERY_MS
    if expired:
        _Progress.expired_at = now
    total = Pruned()
    started = time.monotonic()
    while True:
        done = prune_pass(
            now, policy, batch=s.RETENTION_BATCH, cursor=_Progress.cursor, expired=expired
        )
        total.add(done)
        _Progress.cursor = done.cursor
        expired = False  # one read of that run per tick at most
        spent_ms = (time.monotonic() - started) * 1000
        if not done.more or spent_ms >= s.RETENTION_BUDGET_MS:
            break
    total.cursor, total.more = done.cursor, done.more
    if total.trees or total.dead_letters:
        log.info("retention: %s", total.counts())
    return total
