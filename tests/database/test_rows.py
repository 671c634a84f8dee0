"""The hot path's precompiled row reads and writes (``engine.rows``) agree with the ORM field
for field, JSON columns and nulls included, on every database the suite runs."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import DatabaseError, connection, transaction
from django.forms.models import model_to_dict

from promises import services as promises
from promises.models import Callback, Listener, Promise
from resonate_project.engine import rows
from tasks_app import services as tasks
from tasks_app.models import Task
from tests.support.factories import FAR

pytestmark = pytest.mark.django_db


def fields(obj: object) -> dict[str, object]:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}  # type: ignore[attr-defined]


def test_reads_return_what_the_orm_returns() -> None:
    tags = {"resonate:target": "poll://any@g", "resonate:branch": "root", "ünï": "cödé"}
    promises.promise_create(
        id="root", timeout_at=FAR, now=1, param={"headers": {"a": "b"}, "data": "e30="}, tags=tags
    )
    promises.promise_create(id="root:1", timeout_at=FAR, now=1, tags={"resonate:branch": "root"})
    promises.promise_settle(id="root:1", state="resolved", now=2, value={"data": "eyJ4Ijox"})
    tasks.task_acquire(id="root", version=0, pid="w", ttl=60_000, now=3)

    for p in rows.by_ids(Promise, ["root", "root:1", "absent"]):
        assert fields(p) == fields(Promise.objects.get(id=p.id))
    task = rows.by_id(Task, "root", for_update=True)
    assert fields(task) == fields(Task.objects.get(pk="root"))
    assert rows.by_id(Task, "root:1") is None
    branch = rows.by_column(Promise, "branch", "root", exclude_id="root", limit=10)
    assert [p.id for p in branch] == ["root:1"]
    assert branch[0].value_data == "eyJ4Ijox"


def test_writes_store_what_save_would() -> None:
    promises.promise_create(id="t", timeout_at=FAR, now=1, tags={"resonate:target": "w"})
    task = Task.objects.get(pk="t")
    task.resumes = ["a", "b"]
    task.retry_at = None
    task.pid = "p"
    rows.update(task, ["resumes", "retry_at", "pid"])
    stored = Task.objects.get(pk="t")
    assert (stored.resumes, stored.retry_at, stored.pid) == (["a", "b"], None, "p")
    assert model_to_dict(stored) == model_to_dict(task)


def test_statements_sent_together_run_in_order_each_with_its_own_rows() -> None:
    promises.promise_create(id="a", timeout_at=FAR, now=1)
    table = Promise._meta.db_table
    found = rows.each(
        [
            (f"SELECT id FROM {table} WHERE id = %s", ["a"]),
            (f"UPDATE {table} SET created_at = %s WHERE id = %s", [7, "a"]),
            (f"SELECT id, created_at FROM {table} WHERE id IN (%s, %s)", ["a", "absent"]),
        ]
    )
    assert [list(map(tuple, r)) for r in found] == [[("a",)], [], [("a", 7)]]


def test_a_failing_statement_raises_and_the_ones_after_it_do_not_run() -> None:
    promises.promise_create(id="a", timeout_at=FAR, now=1)
    table = Promise._meta.db_table
    with pytest.raises(DatabaseError), transaction.atomic():
        rows.each(
            [
                (f"SELECT id FROM {table} WHERE id = %s", ["a"]),
                ("SELECT * FROM no_such_table", []),
                (f"UPDATE {table} SET created_at = %s WHERE id = %s", [7, "a"]),
            ]
        )
    assert Promise.objects.get(id="a").created_at == 1


def test_locked_with_returns_the_locked_rows_and_the_other_models_rows_by_key() -> None:
    promises.promise_create(id="t1", timeout_at=FAR, now=1, tags={"resonate:target": "w"})
    promises.promise_create(id="p", timeout_at=FAR, now=1)
    with transaction.atomic():
        locked, read = rows.locked_with(Promise, ["p", "t1", "absent"], Task)
    assert [fields(p) for p in locked] == [fields(Promise.objects.get(id=i)) for i in ("p", "t1")]
    assert [fields(t) for t in read] == [fields(Task.objects.get(pk="t1"))]


def test_subscription_reads_skip_an_empty_list_and_keep_their_order() -> None:
    promises.promise_create(id="a", timeout_at=FAR, now=1, tags={"resonate:scope": "global"})
    promises.promise_register_listener(awaited="a", address="poll://any@g", now=2)
    listeners, nothing, callbacks = rows.values_in_each(
        [
            (Listener, ["awaited_id", "address"], "awaited_id", ["a", "b"]),
            (Listener, ["id"], "awaited_id", []),
            (Callback, ["id"], "awaited_id", ["a"]),
        ]
    )
    assert (listeners, nothing, callbacks) == ([("a", "poll://any@g")], [], [])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_locked_with_reads_what_the_lock_holder_committed_while_it_waited() -> None:
    """The second statement of the pair must see the task as the transaction that held the lock
    left it: the reason the task is not read by the locking statement itself."""
    promises.promise_create(id="job", timeout_at=FAR, now=1, tags={"resonate:target": "w"})
    seen: list[int] = []
    errors: list[BaseException] = []

    def waiter() -> None:
        try:
            with transaction.atomic():
                _, read = rows.locked_with(Promise, ["job"], Task)
                seen.append(read[0].version)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    with transaction.atomic():
        rows.by_id(Promise, "job", for_update=True)
        Task.objects.filter(pk="job").update(version=5)
        thread = threading.Thread(target=waiter)
        thread.start()
        deadline = time.monotonic() + 30
        while not _someone_waits_on_a_lock():
            assert time.monotonic() < deadline, "the waiter never blocked on the lock"
            time.sleep(0.01)
    thread.join(30)
    assert not errors, errors
    assert seen == [5]


def _someone_waits_on_a_lock() -> bool:
    with connection.cursor() as cursor:
        # Inside a transaction the activity view is a snapshot taken at its first read.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        return bool(cursor.fetchone()[0])
