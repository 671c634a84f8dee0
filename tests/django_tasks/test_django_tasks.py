"""Django's Tasks framework on durable promises, through Django's own API (``@task``,
``.enqueue``, ``.get_result``, ``TaskResult.refresh``), with the worker's claim-and-run step in
this process. Real worker processes are in tests/system/test_django_tasks_worker.py."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.db import connection, transaction
from django.tasks import TaskResultStatus, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.utils import timezone

from outbox.models import Message
from promises import services as promises
from promises.models import Callback, Promise
from resonate_project.core.clock import now_ms
from resonate_project.core.errors import ProtocolError
from resonate_project.engine.steps import lease_expiry, retry_dispatch
from tasks_app import jobs
from tasks_app import services as tasks
from tasks_app.backends import ResonateBackend
from tasks_app.models import Job, Task
from tasks_app.worker import Worker
from tests import tasksapp_fixtures as t

pytestmark = pytest.mark.django_db


def configure(settings: Any, **options: Any) -> None:
    settings.TASKS = {
        "default": {
            "BACKEND": "tasks_app.backends.ResonateBackend",
            "QUEUES": ["default", "other"],
            "OPTIONS": {"RETRY_BACKOFF_MS": 0, **options},
        }
    }


@pytest.fixture
def backend(settings: Any) -> Any:
    configure(settings)
    return task_backends["default"]


def worker(queues: tuple[str, ...] = ("default",), pid: str | None = None) -> Worker:
    backend = task_backends["default"]
    assert isinstance(backend, ResonateBackend)
    w = Worker(backend, list(queues), out=lambda line: None)
    if pid is not None:
        w.pid = pid
    return w


def test_a_call_runs_on_a_worker_and_its_result_is_read_back(backend: Any) -> None:
    result = t.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert t.add.get_result(result.id).status == TaskResultStatus.READY

    w = worker()
    assert w.work_once() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.attempts == 1
    assert result.worker_ids == [w.pid]
    assert result.errors == []
    assert result.enqueued_at is not None
    assert result.started_at is not None
    assert result.finished_at is not None
    assert result.last_attempted_at is not None
    assert result.enqueued_at <= result.started_at <= result.finished_at


def test_the_promise_carries_the_call_and_the_result_as_the_sdks_encode_them(backend: Any) -> None:
    result = t.add.enqueue(2, b=3)
    worker().work_once()
    p = Promise.objects.get(id=result.id)
    call = json.loads(base64.b64decode(p.param_data or ""))
    assert call == {"function": "tests.tasksapp_fixtures.add", "args": [2], "kwargs": {"b": 3}}
    assert p.tags["resonate:target"] == "django-tasks://default/default"
    assert p.state == "resolved"
    assert json.loads(base64.b64decode(p.value_data or "")) == 5


def test_no_execute_message_is_ever_written_for_these_tasks(backend: Any) -> None:
    """The worker claims from the database: an execute row would reach no stream and wait in
    the outbox forever (or reach an SDK worker of a same-named group)."""
    result = t.add.enqueue(1, 1)
    later = now_ms() + 3_600_000
    retry_dispatch(later, 100)  # the retry sweep, an hour on
    assert not Message.objects.exists()
    assert t.add.get_result(result.id).status == TaskResultStatus.READY
    assert worker().work_once() == 1
    assert not Message.objects.exists()


def test_an_exception_is_recorded_and_the_call_retried_up_to_the_limit(settings: Any) -> None:
    configure(settings, MAX_ATTEMPTS=3)
    result = t.explode.enqueue("boom")
    w = worker()
    for attempt in (1, 2):
        assert w.work_once() == 1
        result.refresh()
        assert result.status == TaskResultStatus.READY, f"after attempt {attempt}"
        assert len(result.errors) == attempt
    assert w.work_once() == 1
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 3
    assert [e.exception_class for e in result.errors] == [ValueError] * 3
    assert "boom" in result.errors[-1].traceback
    assert "raise ValueError(message)" in result.errors[-1].traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert w.work_once() == 0


def test_retry_policy_per_task_overrides_the_backend_default(settings: Any) -> None:
    configure(
        settings,
        MAX_ATTEMPTS=5,
        TASK_OPTIONS={"tests.tasksapp_fixtures.explode": {"MAX_ATTEMPTS": 1}},
    )
    result = t.explode.enqueue("once")
    worker().work_once()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1


def test_a_retry_waits_for_its_backoff(settings: Any) -> None:
    configure(settings, MAX_ATTEMPTS=2, RETRY_BACKOFF_MS=60_000)
    result = t.explode.enqueue("slowly")
    w = worker()
    assert w.work_once() == 1
    assert w.work_once() == 0  # due a minute later
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert len(result.errors) == 1


def test_the_context_carries_the_attempt_number(backend: Any) -> None:
    result = t.flaky.enqueue(succeed_on=2)
    w = worker()
    w.work_once()
    w.work_once()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert result.attempts == 2
    assert [e.exception_class for e in result.errors] == [RuntimeError]


def test_a_return_value_json_cannot_carry_fails_the_attempt(settings: Any) -> None:
    configure(settings, MAX_ATTEMPTS=1)
    result = t.unserialisable.enqueue()
    worker().work_once()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError


def test_async_tasks_run(backend: Any) -> None:
    result = t.coroutine.enqueue(21)
    worker().work_once()
    result.refresh()
    assert result.return_value == 42


def test_run_after_defers_the_call(backend: Any) -> None:
    result = t.add.using(run_after=timezone.now() + timedelta(minutes=5)).enqueue(1, 2)
    assert worker().work_once() == 0
    assert t.add.get_result(result.id).status == TaskResultStatus.READY
    p = Promise.objects.get(id=result.id)
    assert "resonate:delay" in p.tags


def test_a_sub_millisecond_run_after_is_never_run_early(backend: Any, monkeypatch: Any) -> None:
    # The promise clock counts whole milliseconds; run_after means "not before", so a
    # run_after 0.6 ms into a millisecond is due at the next one, not the one it falls in.
    ms = now_ms() + 60_000
    run_after = datetime.fromtimestamp(ms / 1000, tz=UTC) + timedelta(microseconds=600)
    result = t.add.using(run_after=run_after).enqueue(1, 2)
    monkeypatch.setattr("tasks_app.worker.now_ms", lambda: ms)
    assert worker().work_once() == 0
    monkeypatch.setattr("tasks_app.worker.now_ms", lambda: ms + 1)
    assert worker().work_once() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at is not None
    assert result.started_at >= run_after


def test_a_worker_serves_only_its_queues(backend: Any) -> None:
    other = t.elsewhere.enqueue()
    assert worker(("default",)).work_once() == 0
    assert worker(("other",)).work_once() == 1
    assert t.elsewhere.get_result(other.id).return_value == "other queue"


def test_higher_priority_is_claimed_first_within_a_queue(backend: Any, tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger")
    t.routine.enqueue(ledger)
    t.urgent.enqueue(ledger)
    w = worker()
    w.work_once(limit=1)
    w.work_once(limit=1)
    assert Path(ledger).read_text().split() == ["urgent", "routine"]


def test_enqueue_in_a_rolled_back_transaction_leaves_nothing(
    backend: Any, django_capture_on_commit_callbacks: Any
) -> None:
    class Abort(Exception):
        pass

    ids: list[str] = []

    def view() -> None:
        with transaction.atomic():
            ids.append(t.add.enqueue(1, 2).id)
            raise Abort

    with django_capture_on_commit_callbacks() as callbacks, pytest.raises(Abort):
        view()
    assert callbacks == []  # task_enqueued is never sent
    with pytest.raises(TaskResultDoesNotExist):
        t.add.get_result(ids[0])
    assert not Promise.objects.exists()
    assert not Job.objects.exists()
    assert worker().work_once() == 0


def test_invalid_calls_are_refused_at_enqueue_and_write_nothing(backend: Any) -> None:
    with pytest.raises(TypeError):
        t.add.enqueue(object(), 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidTask):
        t.add.using(queue_name="nowhere")
    with pytest.raises(InvalidTask):
        t.add.using(run_after=timezone.now().replace(tzinfo=None)).enqueue(1, 2)
    assert not Promise.objects.exists()


def test_get_result_of_an_unknown_id(backend: Any) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        t.add.get_result("no-such-result")


def test_a_lost_worker_s_attempt_counts_and_another_worker_finishes(settings: Any) -> None:
    """The first worker's lease lapses (it was SIGKILLed); the next claim takes the task back,
    records the lost attempt, and the first worker's late outcome is refused."""
    configure(settings, MAX_ATTEMPTS=3)
    result = t.add.enqueue(20, 22)
    now = now_ms()
    first = jobs.job_claim(backend="default", queues=["default"], pid="a", ttl=1, now=now, limit=1)
    assert len(first) == 1
    assert t.add.get_result(result.id).status == TaskResultStatus.RUNNING
    second = worker(pid="b")
    assert second.work_once() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    assert result.worker_ids == ["a", "b"]
    assert [e.exception_class for e in result.errors] == [jobs.WorkerLost]
    with pytest.raises(ProtocolError):  # the first worker reports late: fenced out
        jobs.job_succeed(id=result.id, version=first[0].version, value=0, now=now_ms())
    assert t.add.get_result(result.id).return_value == 42


def test_attempts_spent_by_lost_workers_fail_the_call(settings: Any) -> None:
    configure(settings, MAX_ATTEMPTS=1)
    result = t.add.enqueue(1, 1)
    now = now_ms()
    jobs.job_claim(backend="default", queues=["default"], pid="a", ttl=1, now=now, limit=1)
    lease_expiry(now + 10, 100)  # the site's lease step may get there first: same outcome
    assert worker().work_once() == 0
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [jobs.WorkerLost]


def test_a_released_attempt_is_not_counted(backend: Any) -> None:
    result = t.add.enqueue(1, 1)
    [view] = jobs.job_claim(
        backend="default", queues=["default"], pid="a", ttl=60_000, now=now_ms(), limit=1
    )
    jobs.job_release(id=view.id, version=view.version, now=now_ms())
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert result.attempts == 0
    worker().work_once()
    result.refresh()
    assert result.return_value == 2
    assert result.attempts == 1
    assert result.errors == []


def test_cancel_fails_the_call_and_refuses_a_running_attempt(backend: Any) -> None:
    result = t.add.enqueue(1, 1)
    [view] = jobs.job_claim(
        backend="default", queues=["default"], pid="a", ttl=60_000, now=now_ms(), limit=1
    )
    jobs.job_cancel(id=result.id, now=now_ms())
    with pytest.raises(ProtocolError):
        jobs.job_succeed(id=view.id, version=view.version, value=2, now=now_ms())
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [jobs.TaskCanceled]
    assert Task.objects.get(pk=result.id).state == "fulfilled"


def test_rerun_enqueues_the_same_call_again(backend: Any) -> None:
    result = t.add.enqueue(4, 5)
    worker().work_once()
    jobs.job_rerun(id=result.id, new_id="again", now=now_ms())
    again = t.add.get_result("again")
    assert again.status == TaskResultStatus.READY
    assert again.args == [4, 5]
    worker().work_once()
    assert t.add.get_result("again").return_value == 9


def test_unknown_options_fail_the_system_check(settings: Any) -> None:
    configure(settings, MAX_ATEMPTS=3)
    with pytest.raises(SystemCheckError, match=r"resonate\.E040"):
        call_command("check")


def test_a_call_settled_through_the_protocol_is_not_run(backend: Any) -> None:
    """Someone resolves the promise (an SDK, the admin's resolve): the call reads SUCCESSFUL
    with that value, and no worker runs it."""
    result = t.add.enqueue(1, 1)
    promises.promise_settle(
        id=result.id, state="resolved", value=jobs.encode_json("by hand"), now=now_ms()
    )
    assert worker().work_once() == 0
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "by hand"
    assert result.attempts == 0
    assert Job.objects.get(pk=result.id).finished


def test_a_running_call_does_not_hold_up_the_queue(backend: Any, tmp_path: Path) -> None:
    ledger = str(tmp_path / "ledger")
    held = t.urgent.enqueue(ledger)
    jobs.job_claim(
        backend="default", queues=["default"], pid="a", ttl=60_000, now=now_ms(), limit=1
    )
    t.routine.enqueue(ledger)
    assert worker().work_once(limit=1) == 1
    assert Path(ledger).read_text().split() == ["routine"]
    assert t.urgent.get_result(held.id).status == TaskResultStatus.RUNNING


def test_a_halted_call_does_not_hold_up_the_queue(backend: Any, tmp_path: Path) -> None:
    """An operator halted the call at the head of the queue: the claim passes over it (one
    claim, one slot) and runs the next; continued, the halted one runs too."""
    ledger = str(tmp_path / "ledger")
    halted = t.urgent.enqueue(ledger)
    tasks.task_halt(id=halted.id, now=now_ms())
    t.routine.enqueue(ledger)
    assert worker().work_once(limit=1) == 1
    assert Path(ledger).read_text().split() == ["routine"]
    tasks.task_continue(id=halted.id, now=now_ms())
    assert worker().work_once(limit=1) == 1
    assert Path(ledger).read_text().split() == ["routine", "urgent"]


def test_one_refused_outcome_leaves_the_others_in_its_batch_recorded(backend: Any) -> None:
    """The worker records outcomes in batches: a canceled call's report is refused on its own,
    the other call of the same batch succeeds and is never run again."""
    kept, canceled = t.add.enqueue(1, 2), t.add.enqueue(3, 4)
    views = jobs.job_claim(
        backend="default", queues=["default"], pid="a", ttl=60_000, now=now_ms(), limit=2
    )
    assert sorted(v.id for v in views) == sorted([kept.id, canceled.id])
    jobs.job_cancel(id=canceled.id, now=now_ms())
    version = {v.id: v.version for v in views}
    recorded = jobs.job_report(
        outcomes=[
            jobs.Outcome(canceled.id, version[canceled.id], value=7),
            jobs.Outcome(kept.id, version[kept.id], value=3),
        ],
        now=now_ms(),
    )
    assert recorded[kept.id] == jobs.SUCCEEDED
    refused = recorded[canceled.id]
    assert isinstance(refused, ProtocolError)
    assert refused.status == 409
    kept.refresh()
    canceled.refresh()
    assert (kept.status, kept.return_value) == (TaskResultStatus.SUCCESSFUL, 3)
    assert canceled.status == TaskResultStatus.FAILED
    assert worker().work_once() == 0


def test_the_worker_command_needs_a_resonate_backend(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend"}}
    with pytest.raises(CommandError, match=r"is not tasks_app\.backends\.ResonateBackend"):
        call_command("resonate", "worker")
    with pytest.raises(CommandError, match="nowhere"):
        call_command("resonate", "worker", "--backend", "nowhere")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.django_db(transaction=True)
@pytest.mark.anyio
async def test_aenqueue_and_aget_result(settings: Any) -> None:
    configure(settings)
    try:
        result = await t.add.aenqueue(3, 4)
        assert (await t.add.aget_result(result.id)).status == TaskResultStatus.READY
        await sync_to_async(lambda: worker().work_once())()
        await result.arefresh()
        assert result.return_value == 7
    finally:  # the thread sync_to_async ran in keeps its connection otherwise
        await sync_to_async(lambda: connection.close())()


def test_a_finished_call_unblocks_its_listeners_and_drains_its_callbacks(backend: Any) -> None:
    """The worker's batched report settles the call's promise as any settlement does: every
    listener gets its unblock and every callback is drained."""
    result = t.add.enqueue(20, 22)
    now = now_ms()
    promises.promise_register_listener(awaited=result.id, address="poll://any@watchers", now=now)
    awaiter = "workflow-awaiting-the-call"
    target = {"resonate:target": "poll://any@workflows"}
    promises.promise_create(id=awaiter, timeout_at=now + 3_600_000, now=now, tags=target)
    promises.promise_register_callback(awaited=result.id, awaiter=awaiter, now=now)
    assert worker().work_once() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    unblocks = Message.objects.filter(kind="unblock", address="poll://any@watchers")
    assert unblocks.count() == 1
    assert not Callback.objects.filter(awaited_id=result.id).exists()
