"""Whole-row reads and writes for the hot path, with their SQL written once per model.

A queryset is compiled to SQL anew on every evaluation; for the handful of statements every
fenced request runs (lock the task's promise, read its task, the branch preload) that
compilation was about a third of the request's CPU. These functions select every concrete column
by primary key or by one indexed column, and turn each row into a model instance with the same
converters Django applies (JSON fields decoded, and so on), so callers get exactly what the
queryset would have returned.

``insert`` and ``update`` write an instance's columns as ``save(force_insert=True)`` and
``save(update_fields=…)`` would, without the per-call query compilation and without model
signals (host code hears ``promise_settled`` and ``task_completed`` instead).

``for_update`` appends ``FOR UPDATE`` where the database has it (PostgreSQL); on SQLite the
IMMEDIATE transaction already serialises writers, as ``select_for_update`` is a no-op there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any

from django.db import connection, connections
from django.db.models import Model
from django.utils.connection import ConnectionProxy

from resonate_project.engine import scope


@dataclass(frozen=True)
class _Shape:
    select: str  # "SELECT <every column> FROM <table>"
    columns: str  # "<every column>", quoted, in field order
    names: list[str]  # the attnames, in column order (Model.from_db's field_names)
    converters: list[tuple[int, list[Callable[..., Any]], Any]]  # (position, converters, col)


@cache
def _shape(model: type[Model], vendor: str) -> _Shape:
    quote = connection.ops.quote_name
    fields = model._meta.concrete_fields
    table = str(model._meta.db_table)
    columns = ", ".join(quote(str(f.column)) for f in fields)
    converters = []
    for i, f in enumerate(fields):
        col = f.get_col(table)
        found = connection.ops.get_db_converters(col) + f.get_db_converters(connection)
        if found:
            converters.append((i, found, col))
    return _Shape(
        f"SELECT {columns} FROM {quote(table)}",
        columns,
        [str(f.attname) for f in fields],
        converters,
    )


def _instances(model: type[Model], shape: _Shape, sql: str, params: Sequence[Any]) -> list[Any]:
    """Run ``sql`` (which yields every column in field order) and build the instances."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return _build(model, shape, rows)


def _build(
    model: type[Model], shape: _Shape, rows: Sequence[Any], db: Any = connection
) -> list[Any]:
    out = []
    db = _real(db)
    for row in rows:
        values = list(row)
        for i, converters, col in shape.converters:
            for convert in converters:
                values[i] = convert(values[i], col, db)
        out.append(model.from_db(db.alias, shape.names, values))
    return out


def _real(db: Any) -> Any:
    """The connection wrapper itself for Django's ``connection`` proxy, whose every attribute
    read looks the wrapper up again (field value preparation reads it many times per row)."""
    return connections[db.alias] if isinstance(db, ConnectionProxy) else db


def _lock() -> str:
    return " FOR UPDATE" if connection.features.has_select_for_update else ""


def _by_ids_sql(model: type[Model], count: int, for_update: bool) -> str:
    return _by_ids_sql_for(model, connection.vendor, count, for_update)


@cache
def _by_ids_sql_for(model: type[Model], vendor: str, count: int, for_update: bool) -> str:
    pk = connection.ops.quote_name(str(model._meta.pk.column))
    marks = ", ".join(["%s"] * count)
    lock = _lock() if for_update else ""
    return f"{_shape(model, vendor).select} WHERE {pk} IN ({marks}) ORDER BY {pk}{lock}"


def locked_with_statements(
    model: type[Model], ids: Sequence[str], other: type[Model]
) -> list[tuple[str, list[Any]]]:
    """``locked_with``'s two statements, for a caller sending them with others (``each``);
    their rows: ``build(model, …)`` and ``build(other, …)``."""
    return [
        (_by_ids_sql_for(model, connection.vendor, len(ids), True), list(ids)),
        (_by_ids_sql_for(other, connection.vendor, len(ids), False), list(ids)),
    ]


def build(model: type[Model], rows: Sequence[Any], db: Any = connection) -> list[Any]:
    """Instances of ``model`` from rows of every column in field order (the statements above),
    with Django's converters applied. ``db``: the connection (wrapper) they came through."""
    return _build(model, _shape(model, db.vendor), rows, db)


def by_ids(model: type[Model], ids: Sequence[str], *, for_update: bool = False) -> list[Any]:
    """The rows whose primary key is in ``ids``, in ascending key order (the lock order)."""
    if not ids:
        return []
    sql = _by_ids_sql(model, len(ids), for_update)
    return _instances(model, _shape(model, connection.vendor), sql, list(ids))


def locked_with(
    model: type[Model], ids: Sequence[str], other: type[Model]
) -> tuple[list[Any], list[Any]]:
    """``by_ids(model, ids, for_update=True)``, then ``by_ids(other, ids)`` read by a second
    statement, which starts once the first holds its locks and so sees every transaction that
    committed before they were granted (a single statement joining both would not: see
    ``engine.locks``). Both go in one round trip on PostgreSQL (``each``)."""
    if not ids:
        return [], []
    locked, read = each(locked_with_statements(model, ids, other))
    return build(model, locked), build(other, read)


def each(statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
    """Run these statements in order, each as its own statement, and return each one's rows.

    On PostgreSQL they travel in one query string, one round trip: under READ COMMITTED each
    statement of such a string still takes its own snapshot when it starts, exactly as it would
    in a round trip of its own, and an error in any of them raises here with nothing after it
    run. Elsewhere (SQLite, or a cursor binding its values on the server, which allows one
    statement per query) they run one by one."""
    with connection.cursor() as cursor:
        if len(statements) > 1 and _one_string(cursor):
            sql = "; ".join(sql for sql, _ in statements)
            cursor.execute(sql, [value for _, params in statements for value in params])
            out = [_rows(cursor)]
            for _ in statements[1:]:
                cursor.nextset()
                out.append(_rows(cursor))
            return out
        out = []
        for sql, params in statements:
            cursor.execute(sql, params)
            out.append(_rows(cursor))
        return out


def _rows(cursor: Any) -> list[Any]:
    """The current result's rows; none for a statement that returns no rows."""
    return cursor.fetchall() if cursor.description is not None else []


def _one_string(cursor: Any) -> bool:
    """Whether this cursor is psycopg's with client-side binding (Django's default on
    PostgreSQL), which sends a statement with its values inlined, so several can share a query
    string."""
    if connection.vendor != "postgresql":
        return False
    from psycopg import ClientCursor  # only here: psycopg is installed with PostgreSQL

    return isinstance(cursor.cursor, ClientCursor)


def by_id(model: type[Model], id: str, *, for_update: bool = False) -> Any | None:
    rows = by_ids(model, [id], for_update=for_update)
    return rows[0] if rows else None


def by_column(
    model: type[Model], column: str, value: Any, *, exclude_id: str, limit: int
) -> list[Any]:
    """Rows with ``column = value``, but not ``exclude_id``, in key order, at most ``limit``."""
    sql, params = by_column_statement(model, column, value, exclude_id=exclude_id, limit=limit)
    return _instances(model, _shape(model, connection.vendor), sql, params)


def by_column_statement(
    model: type[Model],
    column: str,
    value: Any,
    *,
    exclude_id: str,
    limit: int,
    db: Any = connection,
) -> tuple[str, list[Any]]:
    """``by_column``'s statement and its parameters (its rows: ``build``), narrowed to the
    caller's ids (``engine.scope``): the value is the client's choice (a ``resonate:branch``)."""
    prefix = scope.prefix_of()
    sql = _by_column_sql(model, db.vendor, column, int(limit), bool(prefix))
    params = [value, exclude_id]
    if prefix:
        params.append(scope.prefix_param(prefix, db.vendor))
    return sql, params


@cache
def _by_column_sql(model: type[Model], vendor: str, column: str, limit: int, narrowed: bool) -> str:
    quote = connection.ops.quote_name
    pk = quote(str(model._meta.pk.column))
    where = f"{quote(column)} = %s AND {pk} <> %s"
    if narrowed:
        where += " AND " + scope.prefix_condition(pk, vendor)
    return f"{_shape(model, vendor).select} WHERE {where} ORDER BY {pk} LIMIT {limit}"


def due(model: type[Model], condition: str, column: str, now: int, limit: int) -> list[Any]:
    """Up to ``limit`` rows meeting ``condition`` (SQL on the model's own columns) whose
    ``column`` is at most ``now``, soonest first, locked (``FOR UPDATE SKIP LOCKED`` where the
    database has it: concurrent sweepers never take the same row). What a step sweeps."""
    sql = _due_sql(model, connection.vendor, condition, column)
    return _instances(model, _shape(model, connection.vendor), sql, [now, int(limit)])


@cache
def _due_sql(model: type[Model], vendor: str, condition: str, column: str) -> str:
    col = connection.ops.quote_name(column)
    where = " AND ".join(c for c in (condition, f"{col} <= %s") if c)
    skip = " SKIP LOCKED" if connection.features.has_select_for_update_skip_locked else ""
    lock = _lock() + skip if _lock() else ""
    return f"{_shape(model, vendor).select} WHERE {where} ORDER BY {col} LIMIT %s{lock}"


@cache
def _insert_sql(model: type[Model], vendor: str, skip_existing: bool) -> str:
    quote = connection.ops.quote_name
    fields = model._meta.concrete_fields
    columns = ", ".join(quote(str(f.column)) for f in fields)
    marks = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {quote(str(model._meta.db_table))} ({columns}) VALUES ({marks})"
    if skip_existing:
        pk = quote(str(model._meta.pk.column))
        sql += f" ON CONFLICT ({pk}) DO NOTHING RETURNING {pk}"
    return sql


def insert_statement(
    obj: Model, *, skip_existing: bool = False, db: Any = connection
) -> tuple[str, list[Any]]:
    """The ``INSERT`` of every column of ``obj`` and its values, prepared as ``save`` would;
    with ``skip_existing``, ``ON CONFLICT DO NOTHING RETURNING <pk>`` (a row back: written)."""
    model = type(obj)
    db = _real(db)
    values = [f.get_db_prep_save(f.pre_save(obj, True), db) for f in model._meta.concrete_fields]
    return _insert_sql(model, db.vendor, skip_existing), values


def inserted(obj: Model, db: Any = connection) -> None:
    """Mark ``obj`` as stored (what ``save`` does after its ``INSERT``)."""
    obj._state.adding = False
    obj._state.db = db.alias


def insert(obj: Model, *, skip_existing: bool = False) -> bool:
    """Insert ``obj``; with ``skip_existing``, unless its primary key exists (``ON CONFLICT DO
    NOTHING``: a concurrent creator of the same id makes this wait for its commit, then do
    nothing, so the caller can read the winner). True if the row was written."""
    sql, values = insert_statement(obj, skip_existing=skip_existing)
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        written = cursor.fetchone() is not None if skip_existing else True
    if written:
        inserted(obj)
    return written


@cache
def _update_sql(model: type[Model], vendor: str, names: tuple[str, ...]) -> tuple[str, list[Any]]:
    quote = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in names]
    sets = ", ".join(f"{quote(str(f.column))} = %s" for f in fields)  # type: ignore[union-attr]
    pk = quote(str(model._meta.pk.column))
    return f"UPDATE {quote(str(model._meta.db_table))} SET {sets} WHERE {pk} = %s", fields


_deferring = threading.local()


@contextmanager
def deferred(into: list[tuple[str, list[Any]]]) -> Iterator[None]:
    """Inside (this thread): ``update`` appends its statement to ``into`` instead of running it,
    for a caller that sends them all in one round trip (``each``) before anything reads those
    rows (``tasks_app.jobs.job_report``: a batch's settlements with their job rows)."""
    _deferring.into = into
    try:
        yield
    finally:
        _deferring.into = None


def update(obj: Model, fields: Sequence[str]) -> None:
    """Write these fields of ``obj`` to its row (``save(update_fields=fields)``)."""
    into = getattr(_deferring, "into", None)
    if into is not None:
        into.append(update_statement(obj, fields))
        return
    with connection.cursor() as cursor:
        cursor.execute(*update_statement(obj, fields))


def update_statement(
    obj: Model, fields: Sequence[str], db: Any = connection
) -> tuple[str, list[Any]]:
    """``update``'s statement and its parameters."""
    sql, concrete = _update_sql(type(obj), db.vendor, tuple(fields))
    db = _real(db)
    values = [f.get_db_prep_save(f.pre_save(obj, False), db) for f in concrete]
    return sql, [*values, obj.pk]


def update_returning(
    model: type[Model], values: dict[str, Any], where: str, params: Sequence[Any]
) -> list[Any]:
    """``UPDATE … SET <field> = <value>, … WHERE <where>`` in one statement, returning the rows
    it changed as instances (each value prepared as ``save`` would)."""
    sql, prepared = update_returning_statement(model, values, where, params)
    return _instances(model, _shape(model, connection.vendor), sql, prepared)


def update_returning_statement(
    model: type[Model],
    values: dict[str, Any],
    where: str,
    params: Sequence[Any],
    db: Any = connection,
) -> tuple[str, list[Any]]:
    """``update_returning``'s statement and its parameters (its rows: ``build``)."""
    db = _real(db)
    shape = _shape(model, db.vendor)
    quote = db.ops.quote_name
    fields = [model._meta.get_field(name) for name in values]
    sets = ", ".join(f"{quote(str(f.column))} = %s" for f in fields)  # type: ignore[union-attr]
    prepared = [
        f.get_db_prep_save(value, db)  # type: ignore[union-attr]
        for f, value in zip(fields, values.values(), strict=True)
    ]
    sql = (
        f"UPDATE {quote(str(model._meta.db_table))} SET {sets} WHERE {where} "
        f"RETURNING {shape.columns}"
    )
    return sql, [*prepared, *params]


def insert_all(objs: Sequence[Model]) -> set[Any]:
    """``insert(obj, skip_existing=True)`` for each of ``objs`` (one model, distinct primary keys)
    in one multi-row ``INSERT … ON CONFLICT DO NOTHING RETURNING <pk>``: the keys written."""
    if not objs:
        return set()
    # In key order, as every lock is taken (engine.locks): two batches inserting the same new
    # keys wait for each other in one order, never in a cycle.
    objs = sorted(objs, key=lambda obj: obj.pk)
    model = type(objs[0])
    fields = model._meta.concrete_fields
    one = _insert_sql(model, connection.vendor, False)
    marks = "(" + ", ".join(["%s"] * len(fields)) + ")"
    pk = connection.ops.quote_name(str(model._meta.pk.column))
    sql = one + "".join(", " + marks for _ in objs[1:])
    sql += f" ON CONFLICT ({pk}) DO NOTHING RETURNING {pk}"
    db = _real(connection)
    values = [f.get_db_prep_save(f.pre_save(obj, True), db) for obj in objs for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
        written = {row[0] for row in cursor.fetchall()}
    for obj in objs:
        if obj.pk in written:
            inserted(obj)
    return written


def update_each_returning(
    model: type[Model],
    names: Sequence[str],
    changes: Sequence[tuple[Any, Sequence[Any], int]],
    condition: str,
) -> list[Any]:
    """For each ``(pk, values, now)`` of ``changes`` (distinct keys): ``UPDATE … SET <names> =
    <values> WHERE <pk> = pk AND <condition>`` (``condition``: SQL on the row's own columns and
    ``_now``, the change's ``now``), all in one statement (``UPDATE … FROM`` a ``VALUES`` list);
    returns the rows it changed as instances (each value prepared as ``save`` would)."""
    if not changes:
        return []
    changes = sorted(changes, key=lambda change: change[0])  # key order, as every lock is taken
    db = _real(connection)
    vendor = db.vendor
    quote = connection.ops.quote_name
    fields = [model._meta.get_field(name) for name in names]
    table, pk = quote(str(model._meta.db_table)), quote(str(model._meta.pk.column))
    if vendor == "postgresql":  # VALUES takes its columns' types from the first row
        pk_type = model._meta.pk.db_type(connection)
        types = [f.db_type(connection) for f in fields]
        row = ", ".join(f"CAST(%s AS {t})" for t in [pk_type, *types, "bigint"])
    else:
        row = ", ".join(["%s"] * (len(fields) + 2))
    columns = ", ".join(["_k", *(f"_v{i}" for i in range(len(fields))), "_now"])
    sets = ", ".join(
        f"{quote(str(f.column))} = v._v{i}"  # type: ignore[union-attr]
        for i, f in enumerate(fields)
    )
    returning = ", ".join(f"{table}.{quote(str(f.column))}" for f in model._meta.concrete_fields)
    sql = (
        f"WITH v({columns}) AS (VALUES {', '.join(f'({row})' for _ in changes)}) "
        f"UPDATE {table} SET {sets} FROM v WHERE {table}.{pk} = v._k AND {condition} "
        f"RETURNING {returning}"
    )
    params: list[Any] = []
    for key, values, now in changes:
        params.append(key)
        params.extend(
            f.get_db_prep_save(value, db)  # type: ignore[union-attr]
            for f, value in zip(fields, values, strict=True)
        )
        params.append(now)
    return _instances(model, _shape(model, vendor), sql, params)


def values_in_each(
    queries: Sequence[tuple[type[Model], Sequence[str], str, Sequence[Any]]],
) -> list[list[tuple[Any, ...]]]:
    """For each ``(model, columns, column, wanted)``: ``columns`` (plain values, no converters) of
    the rows whose ``column`` is in ``wanted``. One round trip on PostgreSQL (``each``)."""
    quote = connection.ops.quote_name
    statements = []
    for model, columns, column, wanted in queries:
        if not wanted:
            continue
        marks = ", ".join(["%s"] * len(wanted))
        statements.append(
            (
                f"SELECT {', '.join(quote(c) for c in columns)} "
                f"FROM {quote(str(model._meta.db_table))} WHERE {quote(column)} IN ({marks})",
                list(wanted),
            )
        )
    found = iter(each(statements)) if statements else iter(())
    return [[tuple(row) for row in next(found)] if q[3] else [] for q in queries]


def delete_ids(model: type[Model], ids: Sequence[Any]) -> None:
    """Delete these rows by primary key (no cascade collection: for rows nothing refers to)."""
    if not ids:
        return
    quote = connection.ops.quote_name
    marks = ", ".join(["%s"] * len(ids))
    table, pk = quote(str(model._meta.db_table)), quote(str(model._meta.pk.column))
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE {pk} IN ({marks})", list(ids))
