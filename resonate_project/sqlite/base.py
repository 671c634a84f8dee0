"""SQLite with the writers of one process queued on a lock instead of SQLite's busy handler.

``ENGINE: "resonate_project.sqlite"`` is Django's SQLite backend plus one thing: an outermost
``atomic()`` block takes a per-database-file lock of this process before ``BEGIN IMMEDIATE`` and
gives it back after ``COMMIT`` or ``ROLLBACK``. SQLite lets one writer in at a time; a writer
that finds the file locked sleeps in SQLite's busy handler for 1, 2, 5 … up to 100 ms between
tries, so under concurrent requests a queued writer waits long after the lock was free (the
embedded server's p99 was hundreds of milliseconds). Here it wakes the moment the writer ahead of
it commits. Writers in other processes (a ``manage.py`` command, a Celery worker) still meet the
busy timeout as before, and a lock not given within that timeout is not waited for: the
transaction then proceeds exactly as it would without this backend.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db.backends.sqlite3 import base

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _writer_lock(name: str) -> threading.Lock:
    with _locks_guard:
        lock = _locks.get(name)
        if lock is None:
            lock = _locks[name] = threading.Lock()
        return lock


class DatabaseWrapper(base.DatabaseWrapper):
    """Overrides Django's private transaction hooks (not declared in django-stubs)."""

    _held: threading.Lock | None = None

    def _start_transaction_under_autocommit(self) -> None:
        lock = _writer_lock(str(self.settings_dict["NAME"]))
        timeout = float(self.settings_dict.get("OPTIONS", {}).get("timeout", 5))
        held = lock.acquire(timeout=timeout)
        try:
            super()._start_transaction_under_autocommit()  # type: ignore[misc]  # private in django-stubs
        except BaseException:
            if held:
                lock.release()
            raise
        self._held = lock if held else None

    def _give_back(self) -> None:
        lock, self._held = self._held, None
        if lock is not None:
            lock.release()

    def _commit(self) -> Any:
        try:
            return super()._commit()  # type: ignore[misc]  # private in django-stubs
        finally:
            self._give_back()

    def _rollback(self) -> Any:
        try:
            return super()._rollback()  # type: ignore[misc]  # private in django-stubs
        finally:
            self._give_back()

    def _close(self) -> Any:
        try:
            return super()._close()  # type: ignore[misc]  # private in django-stubs
        finally:
            self._give_back()
