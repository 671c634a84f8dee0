"""PostgreSQL with a transaction's BEGIN sent together with its first statement.

``ENGINE: "resonate_project.postgresql"`` is Django's PostgreSQL backend (psycopg 3) with one
difference. Django starts a transaction by turning the driver's autocommit off, and psycopg then
sends ``BEGIN`` on its own, as one round trip, before the first statement. Here psycopg stays in
autocommit mode (where it lets the application run ``BEGIN`` itself), and the first statement of
the transaction goes out as ``BEGIN; <statement>`` in one round trip; ``COMMIT`` and ``ROLLBACK``
are sent as before (psycopg sends them whenever the server says a transaction is open, and
nothing for a transaction that ran no statement). Every handler is one transaction, so each
request saves a round trip: about one in five of a fenced request's.

The combined text needs client-side binding (Django's default, which sends a statement with its
values inlined by the simple query protocol). A server-side binding cursor, a named cursor or
``executemany`` gets a separate ``BEGIN`` first, as Django would have sent.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db.backends.postgresql import base
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper


class _BeginFirst:
    """Cursor wrapper part: the pending BEGIN goes out with (or, where it cannot, before) the
    next statement."""

    db: DatabaseWrapper
    cursor: Any

    def _execute(self, sql: str, params: Any, *ignored: Any) -> Any:
        if not self.db.begin_pending:
            return super()._execute(sql, params, *ignored)  # type: ignore[misc]
        self.db.begin_pending = False
        if type(self.cursor) is not base.Cursor:  # server-side binding or a named cursor
            self.db.send_begin()
            return super()._execute(sql, params, *ignored)  # type: ignore[misc]
        begin = self.db.begin_command()
        result = super()._execute(f"{begin}; {sql}", params, *ignored)  # type: ignore[misc]
        self.cursor.nextset()  # type: ignore[attr-defined]  # the statement's own result
        return result

    def _executemany(self, sql: str, param_list: Any, *ignored: Any) -> Any:
        if self.db.begin_pending:
            self.db.begin_pending = False
            self.db.send_begin()
        return super()._executemany(sql, param_list, *ignored)  # type: ignore[misc]


class _Cursor(_BeginFirst, CursorWrapper):
    pass


class _DebugCursor(_BeginFirst, base.CursorDebugWrapper):
    pass


class DatabaseWrapper(base.DatabaseWrapper):
    """Overrides Django's private autocommit hook (not declared in django-stubs)."""

    begin_pending = False

    def _set_autocommit(self, autocommit: bool) -> None:
        # Off: a transaction starts with the next statement. On: after COMMIT or ROLLBACK, or a
        # transaction that ran nothing. psycopg's own autocommit stays on throughout.
        self.begin_pending = not autocommit

    def begin_command(self) -> str:
        """``BEGIN`` with the connection's isolation level, read-only and deferrable options,
        exactly as psycopg would start the transaction itself."""
        return bytes(self.connection._get_tx_start_command()).decode()

    def send_begin(self) -> None:
        with self.wrap_database_errors:
            self.connection.execute(self.begin_command())

    def get_new_connection(self, conn_params: Any) -> Any:
        connection = super().get_new_connection(conn_params)
        connection.autocommit = True
        return connection

    def make_cursor(self, cursor: Any) -> CursorWrapper:
        return _Cursor(cursor, self)

    def make_debug_cursor(self, cursor: Any) -> CursorDebugWrapper:
        return _DebugCursor(cursor, self)

    def _close(self) -> Any:
        self.begin_pending = False
        return super()._close()  # type: ignore[misc]  # private in django-stubs


assert issubclass(base.Cursor, psycopg.ClientCursor)
