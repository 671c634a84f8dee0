"""The admin shows calls enqueued through Django's Tasks framework as what they are (function,
arguments, status, attempts, return value or tracebacks) and re-runs or cancels them through
``tasks_app.jobs``."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.tasks import TaskResultStatus, task_backends
from django.test import Client

from tasks_app.backends import ResonateBackend
from tasks_app.models import Job
from tasks_app.worker import Worker
from tests import tasksapp_fixtures as t
from tests.admin.test_admin import act, apply, changelist, detail, logged_in, shown, texts
from tests.django_tasks.test_django_tasks import configure

pytestmark = pytest.mark.django_db


@pytest.fixture
def op(settings: Any) -> Client:
    configure(settings, MAX_ATTEMPTS=1)
    user = User.objects.create_user("op", password="pw", is_staff=True)
    codenames = ["view_job", "view_task", "view_promise", "act_on_task"]
    user.user_permissions.set(Permission.objects.filter(codename__in=codenames))
    return logged_in(user)


def run_due() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, ResonateBackend)
    Worker(backend, ["default"], out=lambda line: None).work_once()


def test_a_call_is_listed_with_its_function_status_and_result(op: Client) -> None:
    done = t.add.enqueue(2, 3)
    failed = t.explode.enqueue("kaboom")
    run_due()
    waiting = t.add.enqueue(7, 8)

    listing = op.get(changelist(Job))
    assert shown(listing) == {done.id, failed.id, waiting.id}
    assert shown(op.get(changelist(Job), {"status": "FAILED"})) == {failed.id}
    assert shown(op.get(changelist(Job), {"status": "READY"})) == {waiting.id}
    assert "tests.tasksapp_fixtures.add" in listing.content.decode()

    page = op.get(detail(Job, failed.id)).content.decode()
    assert "tests.tasksapp_fixtures.explode" in page
    assert "kaboom" in page
    assert "raise ValueError(message)" in page
    assert "FAILED" in page
    assert "SUCCESSFUL" in op.get(detail(Job, done.id)).content.decode()


def test_cancel_fails_a_waiting_call(op: Client) -> None:
    waiting = t.add.enqueue(1, 1)
    asked = act(op, Job, "cancel_jobs", [waiting.id])
    assert "A running attempt is not interrupted" in asked.content.decode()
    done = apply(op, Job, "cancel_jobs", [waiting.id])
    assert any("canceled" in line for line in texts(done))
    result = t.add.get_result(waiting.id)
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "tasks_app.jobs.TaskCanceled"
    run_due()
    assert t.add.get_result(waiting.id).status == TaskResultStatus.FAILED


def test_rerun_enqueues_the_same_call_under_a_new_id(op: Client) -> None:
    failed = t.explode.enqueue("again")
    run_due()
    act(op, Job, "rerun_jobs", [failed.id])
    [copy] = Job.objects.exclude(task_id=failed.id)
    result = t.explode.get_result(copy.task_id)
    assert result.status == TaskResultStatus.READY
    assert result.args == ["again"]


# --- the resource API ---------------------------------------------------------------------------


def test_the_api_lists_and_shows_calls_as_task_results(settings: Any, client: Client) -> None:
    configure(settings, MAX_ATTEMPTS=1)
    done = t.add.enqueue(2, 3)
    failed = t.explode.enqueue("kaboom")
    run_due()
    waiting = t.add.enqueue(7, 8)

    listed = client.get("/api/django-tasks").json()["results"]
    assert {r["id"] for r in listed} == {done.id, failed.id, waiting.id}
    ready = client.get("/api/django-tasks", {"status": "READY"}).json()["results"]
    assert [r["id"] for r in ready] == [waiting.id]

    record = client.get(f"/api/django-tasks/{done.id}").json()
    assert record["function"] == "tests.tasksapp_fixtures.add"
    assert (record["args"], record["status"], record["returnValue"]) == ([2, 3], "SUCCESSFUL", 5)
    assert record["attempts"] == 1
    record = client.get(f"/api/django-tasks/{failed.id}").json()
    assert record["status"] == "FAILED"
    assert "returnValue" not in record
    assert record["errors"][0]["exceptionClassPath"] == "builtins.ValueError"
    assert "kaboom" in record["errors"][0]["traceback"]
    assert client.get("/api/django-tasks/nope").status_code == 404


def test_the_api_cancels_and_reruns(settings: Any, client: Client) -> None:
    configure(settings)
    waiting = t.add.enqueue(1, 2)
    canceled = client.post(f"/api/django-tasks/{waiting.id}/cancel").json()
    assert canceled["status"] == "FAILED"
    assert canceled["errors"][-1]["exceptionClassPath"] == "tasks_app.jobs.TaskCanceled"
    again = client.post(f"/api/django-tasks/{waiting.id}/rerun")
    assert again.status_code == 201
    record = again.json()
    assert record["status"] == "READY"
    assert record["args"] == [1, 2]
    assert record["id"] != waiting.id
    run_due()
    assert t.add.get_result(record["id"]).return_value == 3
