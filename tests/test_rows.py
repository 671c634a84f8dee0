"""The hot path's precompiled row reads and writes (``engine.rows``) agree with the ORM field
for field, JSON columns and nulls included, on every database the suite runs."""

from __future__ import annotations

import pytest
from django.forms.models import model_to_dict

from promises import services as promises
from promises.models import Promise
from resonate_project.engine import rows
from tasks_app import services as tasks
from tasks_app.models import Task
from tests.conftest import FAR

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
