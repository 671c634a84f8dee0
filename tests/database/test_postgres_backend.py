"""``resonate_project.postgresql``: a transaction's BEGIN travels with its first statement, and
nothing a caller can see changes: results, row counts, errors, rollbacks, savepoints, named
cursors, ``executemany`` and the isolation level all behave as with Django's own backend."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import DatabaseError, connection, transaction
from psycopg import IsolationLevel

from promises import services as promises
from promises.models import Promise
from tests.support.factories import FAR

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def in_transaction() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() <> statement_timestamp()")  # equal outside a transaction
        return bool(cursor.fetchone()[0])


def test_it_is_the_backend_in_use() -> None:
    assert type(connection._connections[connection._alias]).__module__ == (  # type: ignore[attr-defined]
        "resonate_project.postgresql.base"
    )


def test_the_first_statement_answers_as_if_alone_and_runs_inside_the_transaction() -> None:
    promises.promise_create(id="a", timeout_at=FAR, now=1)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT id FROM promises_promise WHERE id = %s", ["a"])
            assert cursor.fetchall() == [("a",)]
        assert in_transaction()
    assert not in_transaction()
    with transaction.atomic():
        assert Promise.objects.filter(id="a").update(timeout_at=FAR + 1) == 1  # row count
    assert Promise.objects.get(id="a").timeout_at == FAR + 1


def failing(work: Callable[[], object]) -> None:
    """Run ``work`` in a transaction that then fails (RuntimeError)."""
    with transaction.atomic():
        work()
        raise RuntimeError


def bad_statement() -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT no_such_column FROM promises_promise")


def test_a_rolled_back_transaction_leaves_nothing_whatever_its_first_statement() -> None:
    with pytest.raises(RuntimeError):
        failing(lambda: promises.promise_create(id="gone", timeout_at=FAR, now=1))
    assert not Promise.objects.filter(id="gone").exists()
    with pytest.raises(DatabaseError):
        bad_statement()
    assert Promise.objects.count() == 0  # and the connection is usable again


def test_savepoints_named_cursors_and_executemany_as_first_statements() -> None:
    with transaction.atomic():
        with transaction.atomic():  # a savepoint is the first statement sent
            promises.promise_create(id="kept", timeout_at=FAR, now=1)
        with pytest.raises(RuntimeError):
            failing(lambda: promises.promise_create(id="undone", timeout_at=FAR, now=1))
    assert sorted(Promise.objects.values_list("id", flat=True)) == ["kept"]

    with transaction.atomic():
        assert [p.id for p in Promise.objects.all().iterator(chunk_size=10)] == ["kept"]
        assert in_transaction()

    seen: list[int] = []

    def update_many() -> None:
        with connection.cursor() as cursor:
            cursor.executemany(
                "UPDATE promises_promise SET timeout_at = %s WHERE id = %s", [(5, "kept")]
            )
        seen.append(Promise.objects.get(id="kept").timeout_at)

    with pytest.raises(RuntimeError):
        failing(update_many)
    assert seen == [5]
    assert Promise.objects.get(id="kept").timeout_at == FAR


def test_an_empty_transaction_sends_nothing_and_the_isolation_level_is_kept() -> None:
    with transaction.atomic():
        pass
    assert not in_transaction()
    connection.close()
    connection.settings_dict["OPTIONS"]["isolation_level"] = IsolationLevel.SERIALIZABLE
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SHOW transaction_isolation")
            assert cursor.fetchone() == ("serializable",)
    finally:
        connection.close()
        del connection.settings_dict["OPTIONS"]["isolation_level"]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SHOW transaction_isolation")
        assert cursor.fetchone() == ("read committed",)
