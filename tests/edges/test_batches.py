"""Group commit: the requests waiting for an envelope thread are answered in one transaction
(``resonate_project.edges.api.together``), on both databases, and a client hears only what
committed: a refusal is its own answer, a database error sends every request of the batch
through its own transaction instead, and nothing of an abandoned batch stays behind."""

from __future__ import annotations

import asyncio
import contextvars
import json
from typing import Any

import pytest
from django.db import DatabaseError, connection

from outbox.models import Message
from promises.models import Promise
from resonate_project.edges.api import HandlerThreads, Request, answer_batch, together
from resonate_project.edges.envelope import Envelope, parse
from resonate_project.observability.request import RequestObservation
from tasks_app.models import Task
from tests.support.factories import FAR

pytestmark = pytest.mark.django_db(transaction=True)

NOW = 1_000


def request(kind: str, **data: Any) -> Request:
    body = {"kind": kind, "head": {"corrId": kind}, "data": data}
    env = parse(json.dumps(body).encode())
    assert isinstance(env, Envelope)
    return Request(contextvars.copy_context().run, env, NOW, None, RequestObservation())


def create(id: str, **tags: str) -> Request:
    return request("promise.create", id=id, timeoutAt=FAR, param={}, tags=tags)


def status_and_data(answer: tuple[int, bytes]) -> tuple[int, dict[str, Any]]:
    status, body = answer
    reply = json.loads(body)
    assert reply["head"]["status"] == status
    return status, reply["data"]


def test_a_batch_commits_every_request_in_arrival_order() -> None:
    """The second request reads what the first wrote in the same transaction, and a targeted
    promise's task and execute message commit with it."""
    answers = together(
        [
            create("a"),
            request("promise.settle", id="a", state="resolved", value={}),
            create("job", **{"resonate:target": "poll://any@workers"}),
        ]
    )
    assert answers is not None
    statuses = [status_and_data(a) for a in answers]
    assert [s for s, _ in statuses] == [200, 200, 200]
    assert statuses[1][1]["promise"]["state"] == "resolved"
    assert Promise.objects.get(id="a").state == "resolved"
    assert Task.objects.get(pk="job").state == "pending"
    assert Message.objects.filter(task_id="job", kind="execute").count() == 1
    assert not connection.in_atomic_block


def test_a_refusal_is_its_own_answer_and_the_others_commit() -> None:
    answers = together(
        [
            create("kept-1"),
            request("promise.settle", id="absent", state="resolved", value={}),
            request("promise.settle", id="kept-1", state="bogus", value={}),
            request("task.acquire", id="absent", version=0, pid="w", ttl=1_000),
            create("kept-2"),
        ]
    )
    assert answers is not None
    assert [status_and_data(a)[0] for a in answers] == [200, 404, 400, 404, 200]
    assert sorted(Promise.objects.values_list("id", flat=True)) == ["kept-1", "kept-2"]


def test_a_database_error_abandons_the_batch_and_each_request_runs_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second request's statement fails once, inside the batch: nothing of the batch
    commits, then each request runs in its own transaction and gets the answer it would have
    had alone (here the failing one succeeds on its own, as a retried request would)."""
    failed: list[str] = []

    def fail_once(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not failed and "b-fails" in str(params):
            failed.append(sql)
            raise DatabaseError("boom")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(fail_once):
        assert together([create("a-first"), create("b-fails"), create("c-last")]) is None
        assert failed
        assert not Promise.objects.exists()  # the first request's write was rolled back too
        failed.clear()
        outcomes = answer_batch([create("a-first"), create("b-fails"), create("c-last")])
    assert [status_and_data(result)[0] for result, _ in outcomes] == [200, 200, 200]
    assert Promise.objects.count() == 3


def test_the_threads_answer_a_burst_in_batches_and_each_future_gets_its_answer() -> None:
    threads = HandlerThreads(1, batch=8)

    async def burst() -> list[tuple[int, bytes]]:
        return list(
            await asyncio.gather(
                *(threads.run(create(f"burst-{i}")) for i in range(40)),
                threads.run(request("promise.get", id="missing")),
            )
        )

    try:
        answers = asyncio.run(burst())
    finally:
        threads.stop()
    ids = [status_and_data(a)[1].get("promise", {}).get("id") for a in answers[:-1]]
    assert ids == [f"burst-{i}" for i in range(40)]
    assert status_and_data(answers[-1])[0] == 404
    assert Promise.objects.filter(id__startswith="burst-").count() == 40


def test_a_read_that_fails_abandons_the_batch_too() -> None:
    """A request with no unit of work (a read) that meets a database error answers 5xx without
    marking Django's transaction for rollback; the batch is abandoned all the same, so no later
    request runs in a transaction the database has given up on."""

    def fail_reads(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "read-fails" in str(params):
            raise DatabaseError("boom")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(fail_reads):
        batch = [create("before"), request("promise.get", id="read-fails"), create("after")]
        assert together(batch) is None
    assert not Promise.objects.exists()
