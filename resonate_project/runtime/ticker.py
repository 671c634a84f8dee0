"""The step runner: runs the internal steps when their next deadline comes, and at least every
TICK_INTERVAL_MS (the safety net for a wake-up that never came).

In the embedded server it is a daemon thread of the server process (:class:`Runner`). It sleeps
until the earliest deadline the database holds (``engine.steps.next_due``) or the next tick,
whichever comes first, and a commit that writes an earlier deadline wakes it
(``engine.wake.deadline``). A tick runs every step; a deadline runs only the steps that are due,
so a timer's settlement is not queued behind steps with nothing to do. Under Celery each
``resonate.tick`` (beat's, or one planned for a deadline) runs one pass (:func:`celery_tick`) and
plans the tick for the next deadline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import close_old_connections, connections

from resonate_project.core.clock import now_ms
from resonate_project.core.conf import resonate_settings
from resonate_project.engine import retention, wake
from resonate_project.engine.debug import paused
from resonate_project.engine.steps import next_due, run_deadlines, run_due

log = logging.getLogger("resonate.ticker")

# A pass that claimed nothing although something was due (another sweeper holds those rows, or
# the clock went back) waits this long before trying again, instead of spinning.
STUCK_BACKOFF_MS = 25
# A planned ``resonate.tick`` that starts before its instant (it is queued a little ahead) waits
# for it, up to this long.
EARLY_WAIT_MS = 1000
NEVER = 2**63  # the runner's wake-up instant while a pass runs: any deadline heard is earlier


def run_pass(
    now: int, full: bool = True, before_planning: Callable[[], None] | None = None
) -> tuple[int, int | None]:
    """One pass at ``now``: every step (``full``), or only those whose deadline has come; then
    the next deadline (None: none, or paused). ``before_planning`` runs between the two."""
    if paused():
        return 0, None
    batch = resonate_settings().STEP_BATCH
    rows = run_due(now, batch) if full else run_deadlines(now, batch)
    if full:
        retention.tick(now)
    if before_planning is not None:
        before_planning()
    return rows, next_due()


def next_pass_at(now: int, rows: int, due: int | None, tick_at: int) -> int:
    """When the pass after one at ``now`` (that processed ``rows``) should start: at the next
    deadline ``due``, or at the next tick ``tick_at`` if that comes first."""
    if due is None:
        return tick_at
    if due <= now and rows == 0:
        due = now + STUCK_BACKOFF_MS
    return min(tick_at, due)


def celery_tick(at: int | None) -> int:
    """``resonate.tick``: one pass, then plan the tick for the next deadline if it comes before
    the next beat tick. ``at``: the instant a planned tick was queued for (None from beat, whose
    ticks run every step; a planned tick runs the steps that are due)."""
    if at is not None:  # queued a little ahead of its instant (wake.PLAN_LEAD_MS)
        early = at / 1000 - time.time()
        if early > 0:
            time.sleep(min(early, EARLY_WAIT_MS / 1000))
    now = now_ms()
    # The plan for this tick is spent before the next deadline is read (so a deadline committed
    # meanwhile is either seen by that read or plans its own tick), but after the steps: the Redis
    # round trip stays off the critical path of the timers due now.
    rows, due = run_pass(now, full=at is None, before_planning=lambda: wake.tick_started(now))
    if due is not None:
        tick = resonate_settings().TICK_INTERVAL_MS
        wake.plan_tick(next_pass_at(now, rows, due, now + tick), now_ms())
    return rows


class Runner:
    """The embedded server's step runner thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None
        # When the next pass starts (ms); a deadline heard earlier than this moves it. During a
        # pass it is "never", so a deadline committed meanwhile is kept as well.
        self._wake_at = 0

    def hear(self, at: int) -> None:
        """``engine.wake``'s deadline subscriber: a commit wrote a deadline ``at``."""
        with self._lock:
            if at < self._wake_at:
                self._wake_at = at
                self._event.set()

    def stop(self, wait: float = 5.0) -> None:
        """Stop after the pass under way (waiting for it up to ``wait`` seconds)."""
        with self._lock:
            self._stopped = True
            self._event.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(wait)

    def start(self) -> None:
        wake.subscribe_deadlines(self.hear)
        self._thread = threading.Thread(target=self._loop, name="resonate-ticker", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        tick_at = 0  # the next full pass: every step, whether or not a deadline is known
        try:
            while self._sleep():
                with self._lock:
                    self._wake_at = NEVER
                now = now_ms()
                full = now >= tick_at
                if full:
                    tick_at = now + resonate_settings().TICK_INTERVAL_MS
                try:
                    close_old_connections()
                    rows, due = run_pass(now, full)
                    at = next_pass_at(now, rows, due, tick_at)
                except Exception:
                    log.exception("internal steps failed; trying again next tick")
                    at = tick_at
                with self._lock:
                    self._wake_at = min(self._wake_at, at)
        finally:
            wake.unsubscribe_deadlines(self.hear)
            connections.close_all()  # this thread's: a stopped runner holds no connection

    def _sleep(self) -> bool:
        """Wait until ``_wake_at`` (which a heard deadline may bring forward); False once
        stopped."""
        while True:
            with self._lock:
                if self._stopped:
                    return False
                self._event.clear()
                left = self._wake_at / 1000 - time.time()
            if left <= 0:
                return True
            self._event.wait(left)


def start() -> Runner:
    runner = Runner()
    runner.start()
    return runner
