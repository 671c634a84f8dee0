"""Plain promise transitions on the event loop: PostgreSQL through psycopg's async connections,
without the hand-off to a thread (and back) that every other request takes.

A plain promise (``promise_transitions.is_plain``: no target, not external) is born and settled by
one statement each that enables no step, so in autocommit the statement is the whole transaction:
the same SQL as ``engine.promise_transitions.create_plain`` and ``settle_plain``, with the same
prepared values and the same row conversion (``engine.rows``), sent from the loop. Each event loop
(one per web process, from the ASGI lifespan's startup, ``start``) keeps ``LOOP_CONNECTIONS``
connections (``Connections``), each opened on first use with the Django connection's parameters and
closed by ``close`` (the lifespan's shutdown).
A connection that fails is dropped and the next request opens its replacement; the request that
met the failure answers 503.
psycopg is imported only where a connection is opened or looked at: a host on SQLite need not
have it, and the path is off there (``loop_connections``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from functools import cache
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, OperationalError, connections

from promises.models import Promise
from resonate_project.core.conf import resonate_settings
from resonate_project.core.wire.promises import PromiseCreateReq, Value
from resonate_project.engine import promise_transitions, rows
from tasks_app.models import Task

if TYPE_CHECKING:
    import psycopg

# How long a request waits for one of the loop's connections before answering 503 (they are all
# busy for far less than this unless the database is unreachable).
WAIT_S = 10.0
# How the loop's connections appear in pg_stat_activity.
APPLICATION_NAME = "django-resonate loop"


@cache
def django_connection() -> Any:
    """A Django wrapper of the default database for the loop's SQL building, value preparation,
    row conversion and error translation (it never connects). Not ``connections[...]``: on an
    event loop that is a new wrapper in every request's context."""
    return connections.create_connection(DEFAULT_DB_ALIAS)


def vendor() -> str:
    return str(django_connection().vendor)


def loop_connections() -> int:
    """``LOOP_CONNECTIONS``: -1 (the default) is 2 on PostgreSQL; 0, or any other database,
    turns the loop path off (every request takes the envelope's threads)."""
    if vendor() != "postgresql":
        return 0
    count = resonate_settings().LOOP_CONNECTIONS
    return 2 if count < 0 else count


class Connections:
    """One event loop's connections: a queue holding, for each of ``size`` slots, its idle
    connection or None (not connected yet, or dropped after a failure), so a request takes one
    without waiting whenever one is free, and connects a slot's replacement itself.

    Not psycopg's ``AsyncConnectionPool``: its hand-out (a waiting-client object, a condition and
    a timeout per request, and the return path's checks) cost as much server CPU per request as
    the thread hand-off this path removes (measured: docs/explanation/benchmark-history.md)."""

    def __init__(self, size: int) -> None:
        self.idle: asyncio.Queue[psycopg.AsyncConnection[Any] | None] = asyncio.Queue()
        for _ in range(size):
            self.idle.put_nowait(None)
        self.closed = False

    async def take(self) -> psycopg.AsyncConnection[Any]:
        try:
            conn = self.idle.get_nowait()
        except asyncio.QueueEmpty:
            try:
                async with asyncio.timeout(WAIT_S):
                    conn = await self.idle.get()
            except TimeoutError:
                raise OperationalError(
                    f"no database connection free within {WAIT_S:.0f} s"
                ) from None
        if conn is None:
            try:
                conn = await _connect()
            except BaseException:
                self.idle.put_nowait(None)
                raise
        return conn

    def give_back(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Return ``conn`` to its slot, or close it and leave the slot empty: when a failure
        broke it or left a statement running (a cancelled request), or once closed."""
        if _idle(conn) and not conn.broken and not self.closed:
            self.idle.put_nowait(conn)
            return
        self.idle.put_nowait(None)
        closing = asyncio.get_running_loop().create_task(conn.close())
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)

    async def close(self) -> None:
        self.closed = True
        while not self.idle.empty():
            conn = self.idle.get_nowait()
            if conn is not None:
                await conn.close()


def _idle(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether ``conn`` is outside any transaction, its last statement done."""
    from psycopg.pq import TransactionStatus

    return conn.info.transaction_status == TransactionStatus.IDLE


async def _connect() -> psycopg.AsyncConnection[Any]:
    """A connection with the Django connection's parameters (its adapters, so JSON arrives as
    text for the fields' own decoders), binding values on the client as Django's cursors do, in
    autocommit, as the role Django assumes if it is set to assume one; named
    ``APPLICATION_NAME`` unless the database's OPTIONS name one."""
    from psycopg import AsyncClientCursor, AsyncConnection, sql

    wrapper = django_connection()
    params = wrapper.get_connection_params()
    params["cursor_factory"] = AsyncClientCursor
    params["autocommit"] = True
    params.setdefault("application_name", APPLICATION_NAME)  # unless OPTIONS names one
    conn = await AsyncConnection.connect(**params)
    if role := wrapper.settings_dict["OPTIONS"].get("assume_role"):
        await conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    return conn


# The event loops of served applications (from the ASGI lifespan's startup to its shutdown).
_loops: dict[asyncio.AbstractEventLoop, Connections] = {}
_closing: set[asyncio.Task[None]] = set()


def start() -> None:
    """Answer plain promises on this event loop from now on (the ASGI lifespan's startup): only
    a loop that lives as long as the application gets connections of its own. Elsewhere (a
    server without lifespan events; Django's async view under WSGI, which runs each request in a
    loop of its own) every request takes the threads. A no-op where ``loop_connections()`` is 0."""
    size = loop_connections()
    if size:
        _loops.setdefault(asyncio.get_running_loop(), Connections(size))


def serving() -> bool:
    """Whether ``start`` was called on the running event loop (and ``close`` not yet)."""
    return asyncio.get_running_loop() in _loops


async def close() -> None:
    """Close this event loop's connections (the ASGI lifespan's shutdown); a no-op if it has
    none. A connection still in use is closed when its request gives it back."""
    found = _loops.pop(asyncio.get_running_loop(), None)
    if found is not None:
        await found.close()


async def _rows(sql: str, params: list[Any]) -> list[Any]:
    """The statement's rows (on a loop that ``start`` was called on); the driver's errors raised
    as Django's (``OperationalError`` for an unreachable database or no free connection within
    ``WAIT_S``), as on the threads."""
    pool = _loops[asyncio.get_running_loop()]
    with django_connection().wrap_database_errors:
        conn = await pool.take()
        try:
            cursor = await conn.execute(sql, params)
            return await cursor.fetchall() if cursor.description is not None else []
        finally:
            pool.give_back(conn)


async def create_plain(req: PromiseCreateReq, now: int) -> Promise | None:
    """``engine.promise_transitions.create_plain`` on the loop: the new promise, or None if the id
    exists."""
    p, db = promise_transitions.new_promise(req, now), django_connection()
    sql, values = rows.insert_statement(p, skip_existing=True, db=db)
    if not await _rows(sql, values):
        return None
    rows.inserted(p, db)
    return p


async def settle_plain(promise_id: str, state: str, value: Value, now: int) -> Promise | None:
    """``engine.promise_transitions.settle_plain`` on the loop: the settled promise, or None unless
    it was live at ``now`` and plain."""
    db = django_connection()
    found = await _rows(
        *promise_transitions.settle_plain_statement(promise_id, state, value, now, db)
    )
    return rows.build(Promise, found, db)[0] if found else None


async def promise_by_id(promise_id: str) -> Promise | None:
    found = await _rows(*rows.by_id_statement(Promise, promise_id))
    return rows.build(Promise, found, django_connection())[0] if found else None


# --- a transaction on the loop (task.fence with a plain inner action) ---------------------------


class HandOff(Exception):
    """Raised inside ``transaction()`` when the loop leaves a request to the threads after all:
    the transaction rolls back, having changed nothing."""


class Transaction:
    """Statements of one transaction on one of the loop's connections. The ``BEGIN`` goes out
    with the first statements and the ``COMMIT`` with the last (``commit_with``), each batch one
    query string, one round trip (as ``rows.each``: under READ COMMITTED each statement of a
    string takes its own snapshot when it starts)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self.begun = False
        self.done = False

    async def each(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
        """Run these statements in order; each one's rows."""
        batch = list(statements)
        lead = 0 if self.begun else 1
        if not self.begun:
            batch.insert(0, ("BEGIN", []))
            self.begun = True
        return (await _batch(self.conn, batch))[lead:]

    async def commit_with(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
        """Run these statements, then commit, in the same round trip; each one's rows."""
        found = await self.each([*statements, ("COMMIT", [])])
        self.done = True
        return found[:-1]


async def _batch(
    conn: psycopg.AsyncConnection[Any], statements: list[tuple[str, Sequence[Any]]]
) -> list[list[Any]]:
    sql = "; ".join(sql for sql, _ in statements)
    cursor = await conn.execute(sql, [value for _, params in statements for value in params])
    out = [await cursor.fetchall() if cursor.description is not None else []]
    while cursor.nextset():
        out.append(await cursor.fetchall() if cursor.description is not None else [])
    return out


@asynccontextmanager
async def transaction() -> AsyncIterator[Transaction]:
    """``async with transaction() as tx:`` one transaction on a connection of this loop; an
    exception (a refusal, ``HandOff``) rolls it back. The caller ends it with ``commit_with``;
    a block that returns without it commits with nothing more."""
    pool = _loops[asyncio.get_running_loop()]
    with django_connection().wrap_database_errors:
        conn = await pool.take()
        tx = Transaction(conn)
        try:
            yield tx
            if tx.begun and not tx.done:
                await tx.commit_with([])
        except BaseException:
            if not _idle(conn):
                # Failing, the connection is dropped instead (give_back: not idle).
                with suppress(Exception):
                    await conn.execute("ROLLBACK")
            raise
        finally:
            pool.give_back(conn)


async def tasks_for_update(tx: Transaction, ids: list[str]) -> dict[str, tuple[Task | None, Any]]:
    """``engine.locks.tasks_for_update`` in ``tx``: the promises locked in id order, and their
    tasks read after the locks are held, in one round trip."""
    db = django_connection()
    wanted = sorted(set(ids))
    locked, read = await tx.each(rows.locked_with_statements(Promise, wanted, Task, db))
    tasks = {t.pk: t for t in rows.build(Task, read, db)}
    return {p.id: (tasks.get(p.id), p) for p in rows.build(Promise, locked, db)}


async def create_plain_in(tx: Transaction, req: PromiseCreateReq, now: int) -> Promise | None:
    """``create_plain`` in ``tx``: the new promise, or None if its id exists."""
    p, db = promise_transitions.new_promise(req, now), django_connection()
    (written,) = await tx.each([rows.insert_statement(p, skip_existing=True, db=db)])
    if not written:
        return None
    rows.inserted(p, db)
    return p


async def settle_locked(tx: Transaction, p: Promise, state: str, value: Value, now: int) -> None:
    """``engine.promise_transitions.settle`` of a plain promise ``tx`` holds locked (no task to
    fulfil)."""
    fields = promise_transitions.apply_settlement(p, state, value, now)
    await tx.each([rows.update_statement(p, fields, django_connection())])
