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
from django.tasks import TaskContext, TaskResultStatus
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


@dataclass
class Worker:
    backend: ResonateBackend
    queues: list[str]
    concurrency: int = 1
    grace: float = 30.0
    out: Callable[[str], Any] = print
    pid: str = field(default_factory=worker_id)
    running: dict[str, jobs.JobView] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Claimed attempts for the runner threads; each runner keeps its own database connection.
    todo: queue.SimpleQueue[jobs.JobView] = field(default_factory=queue.SimpleQueue)

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
        """Claim due calls and run them one after another in this thread; how many (tests,
        the benchmark)."""
        claimed = self.claim_due(limit)
        for view in claimed:
            self.run_claimed(view)
        return len(claimed)

    def claim(self) -> int:
        """Claim as many due calls as there are free slots and start them; how many."""
        with self.lock:
            free = self.concurrency - len(self.running)
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
            self.todo.put(view)
        return len(claimed)

    def runner(self) -> None:
        """One of ``concurrency`` threads: runs claimed attempts one at a time."""
        while True:
            view = self.todo.get()
            try:
                self.run_claimed(view)
            except DatabaseError:
                log.exception(
                    "%s: the outcome could not be recorded (the lease will lapse)", view.id
                )
                close_old_connections()
            finally:
                with self.lock:
                    self.running.pop(view.id, None)
                self.wake.set()

    def run_claimed(self, view: jobs.JobView) -> None:
        """Run one claimed attempt and record its outcome (fenced by its version)."""
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
        now = now_ms()
        try:
            if error is None:
                jobs.job_succeed(id=view.id, version=view.version, value=value, now=now)
                status = TaskResultStatus.SUCCESSFUL
            else:
                retry = jobs.job_fail(id=view.id, version=view.version, error=error, now=now)
                status = TaskResultStatus.READY if retry else TaskResultStatus.FAILED
                log.info("%s attempt %d failed (%s)", view.id, view.version, status)
        except ProtocolError as refused:  # fenced out: the lease lapsed and someone took over
            log.warning("%s attempt %d not recorded: %s", view.id, view.version, refused)
            return
        if result is not None:  # the attempt's outcome, without reading it back
            object.__setattr__(result, "status", status)
            object.__setattr__(result, "last_attempted_at", instant(now))
            if status == TaskResultStatus.SUCCESSFUL:
                object.__setattr__(result, "_return_value", value)
            if error is not None:
                result.errors.append(
                    TaskError(
                        exception_class_path=error["exception_class_path"], traceback=trace(error)
                    )
                )
            if status != TaskResultStatus.READY:
                object.__setattr__(result, "finished_at", instant(now))
            task_finished.send(type(self.backend), task_result=result)

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
