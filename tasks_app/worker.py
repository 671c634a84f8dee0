"""``manage.py resonate worker``: runs the calls enqueued through ``tasks_app.backends``.

The worker shares the site's database and claims due jobs of its queues straight from it
(``jobs.job_claim``: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL), acquiring each task with a lease
of ``LEASE_MS``. Each call runs in its own thread (at most ``concurrency`` at once) while one
heartbeat thread extends every lease at half its length; the outcome is recorded fenced by the
attempt's task version, so an attempt whose lease lapsed and was taken over records nothing.
SIGTERM (or Ctrl-C) stops claiming, lets running calls finish for ``grace`` seconds, then
releases what is left. A worker that is SIGKILLed loses nothing: its leases lapse and any
worker takes the calls back (counting the lost attempt).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, close_old_connections
from django.tasks import TaskContext, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json

from resonate_project.core.clock import now_ms
from resonate_project.core.errors import ProtocolError
from tasks_app import jobs
from tasks_app import services as tasks
from tasks_app.backends import ResonateBackend, instant, trace

log = logging.getLogger("resonate.worker")


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def failure(exc: BaseException) -> dict[str, str]:
    return jobs.task_error(type(exc), str(exc), "".join(traceback.format_exception(exc)))


def finished(
    sender: type, result: TaskResult, status: TaskResultStatus, outcome: jobs.Outcome, now: int
) -> None:
    """The attempt's outcome on its ``TaskResult`` (without reading it back), then
    ``task_finished``."""
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "last_attempted_at", instant(now))
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", outcome.value)
    if outcome.error is not None:
        result.errors.append(
            TaskError(
                exception_class_path=outcome.error["exception_class_path"],
                traceback=trace(outcome.error),
            )
        )
    if status != TaskResultStatus.READY:
        object.__setattr__(result, "finished_at", instant(now))
    task_finished.send(sender, task_result=result)


# Outcomes recorded per transaction at most: a batch holds its jobs' and promises' row locks
# until it commits, and one settlement's listeners are drained inside it.
REPORT_BATCH = 64


@dataclass
class Attempt:
    """A finished attempt waiting to be recorded: its outcome, and the ``TaskResult`` the
    ``task_finished`` signal carries (None if the call could not even be looked up)."""

    view: jobs.JobView
    outcome: jobs.Outcome
    result: TaskResult | None


@dataclass
class Worker:
    backend: ResonateBackend
    queues: list[str]
    concurrency: int = 1
    grace: float = 30.0
    out: Callable[[str], Any] = print
    pid: str = field(default_factory=worker_id)
    # Held leases, from the claim until the outcome is recorded: what the heartbeat extends.
    running: dict[str, jobs.JobView] = field(default_factory=dict)
    # Runner slots taken: claimed attempts not yet finished running (recording them is the
    # reporter's, so the next claim overlaps it).
    busy: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Claimed attempts for the runner threads; each runner keeps its own database connection.
    todo: queue.SimpleQueue[jobs.JobView] = field(default_factory=queue.SimpleQueue)
    # Finished attempts for the reporter thread, which records them in batches.
    done: queue.SimpleQueue[Attempt] = field(default_factory=queue.SimpleQueue)

    def stop(self, *_: Any) -> None:
        self.stopping.set()
        self.wake.set()

    def run(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        self.out(
            f"worker {self.pid} on {self.backend.alias}: queues {', '.join(self.queues)}, "
            f"concurrency {self.concurrency}"
        )
        threading.Thread(target=self.heartbeat, name="heartbeat", daemon=True).start()
        threading.Thread(target=self.reporter, name="reporter", daemon=True).start()
        for n in range(self.concurrency):
            threading.Thread(target=self.runner, name=f"runner {n}", daemon=True).start()
        while not self.stopping.is_set():
            if not self.claim():
                self.wake.wait(self.backend.poll_interval_ms / 1000)
                self.wake.clear()
        self.drain()

    def claim_due(self, limit: int) -> list[jobs.JobView]:
        return jobs.job_claim(
            backend=self.backend.alias,
            queues=self.queues,
            pid=self.pid,
            ttl=self.backend.lease_ms,
            now=now_ms(),
            limit=limit,
        )

    def work_once(self, limit: int = 100) -> int:
        """Claim due calls and run them one after another in this thread, recording each
        outcome as it comes; how many (tests, the benchmark)."""
        claimed = self.claim_due(limit)
        for view in claimed:
            self.record([self.attempt(view)])
        return len(claimed)

    def claim(self) -> int:
        """Claim as many due calls as there are free runner slots and start them; how many."""
        with self.lock:
            free = self.concurrency - self.busy
        if free <= 0:
            return 0
        try:
            claimed = self.claim_due(free)
        except DatabaseError:
            log.exception("claim failed; retrying")
            close_old_connections()
            return 0
        for view in claimed:
            with self.lock:
                self.running[view.id] = view
                self.busy += 1
            self.todo.put(view)
        return len(claimed)

    def runner(self) -> None:
        """One of ``concurrency`` threads: runs claimed attempts one at a time and hands each
        outcome to the reporter, freeing its slot for the next claim at once."""
        while True:
            view = self.todo.get()
            try:
                self.done.put(self.attempt(view))
            finally:
                with self.lock:
                    self.busy -= 1
                self.wake.set()

    def reporter(self) -> None:
        """Records finished attempts, as many as are waiting (up to ``REPORT_BATCH``) in one
        transaction; an attempt is let go (its lease no longer extended) once recorded."""
        while True:
            batch = [self.done.get()]
            while len(batch) < REPORT_BATCH:
                try:
                    batch.append(self.done.get_nowait())
                except queue.Empty:
                    break
            try:
                self.record(batch)
            except DatabaseError:
                # The batch rolled back as a whole; record its attempts one by one, so one that
                # cannot be recorded costs only its own outcome (its lease lapses, and the call
                # runs again).
                close_old_connections()
                for one in batch:
                    try:
                        self.record([one])
                    except DatabaseError:
                        log.exception(
                            "%s: the outcome could not be recorded (the lease will lapse)",
                            one.view.id,
                        )
                        close_old_connections()
            finally:
                with self.lock:
                    for one in batch:
                        self.running.pop(one.view.id, None)
                self.wake.set()

    def attempt(self, view: jobs.JobView) -> Attempt:
        """Run one claimed attempt (the call, its signals); its outcome is recorded later."""
        error: dict[str, str] | None = None
        value: Any = None
        result = None
        try:
            result = self.backend.result_of(view)  # RUNNING: the claim holds the task
            task_started.send(type(self.backend), task_result=result)
            task, call = result.task, view.call
            if task.takes_context:
                raw = task.call(TaskContext(task_result=result), *call.args, **call.kwargs)
            else:
                raw = task.call(*call.args, **call.kwargs)
            value = normalize_json(raw)
            json.dumps(value)
        except Exception as exc:
            error = failure(exc)
        return Attempt(view, jobs.Outcome(view.id, view.version, value, error), result)

    def record(self, batch: list[Attempt]) -> None:
        """Record these attempts' outcomes (fenced by their versions) in one transaction, then
        send ``task_finished`` for each that was recorded."""
        now = now_ms()
        recorded = jobs.job_report(outcomes=[a.outcome for a in batch], now=now)
        for a in batch:
            outcome = recorded[a.view.id]
            if isinstance(outcome, ProtocolError):  # fenced out: the lease lapsed, or canceled
                log.warning("%s attempt %d not recorded: %s", a.view.id, a.view.version, outcome)
                continue
            status = {
                jobs.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
                jobs.RETRYING: TaskResultStatus.READY,
                jobs.FAILED: TaskResultStatus.FAILED,
            }[outcome]
            if a.outcome.error is not None:
                log.info("%s attempt %d failed (%s)", a.view.id, a.view.version, status)
            if a.result is not None:
                finished(type(self.backend), a.result, status, a.outcome, now)

    def heartbeat(self) -> None:
        """Extend every held lease at half the lease length (T-05 skips what is not ours)."""
        period = self.backend.lease_ms / 2000
        while True:
            time.sleep(period)
            with self.lock:
                held = [(v.id, v.version) for v in self.running.values()]
            if not held:
                continue
            try:
                tasks.task_heartbeat(pid=self.pid, tasks=held, now=now_ms())
            except DatabaseError:
                log.exception("heartbeat failed; retrying")
                close_old_connections()

    def drain(self) -> None:
        """Stopping: let running calls finish for ``grace`` seconds, then release the rest."""
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            with self.lock:
                if not self.running:
                    break
            self.wake.wait(0.1)
            self.wake.clear()
        with self.lock:
            left = list(self.running.values())
        for view in left:
            try:
                jobs.job_release(id=view.id, version=view.version, now=now_ms())
                self.out(f"released {view.id} (attempt {view.version} unfinished)")
            except ProtocolError as refused:
                log.warning("%s not released: %s", view.id, refused)
        self.out(f"worker {self.pid} stopped")
