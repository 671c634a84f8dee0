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
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from outbox.models import Message
from promises.models import Promise
from resonate_project.access.credentials import credential_create
from resonate_project.core.signals import promise_settled
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


def settle(id: str, state: str = "resolved", data: str = "eA==") -> Request:
    return request(
        "promise.settle", id=id, state=state, value={"headers": {"h": "1"}, "data": data}
    )


def writes(queries: list[dict[str, Any]]) -> list[str]:
    """The first word of each statement that writes (PostgreSQL sends BEGIN with the first)."""
    statements = [q["sql"].removeprefix("BEGIN;").lstrip() for q in queries]
    return [s.split()[0].upper() for s in statements if s.upper().startswith(("INSERT", "WITH"))]


def test_plain_births_and_settlements_of_a_batch_share_one_statement_each() -> None:
    """Plain creates of distinct ids are one INSERT, their settlements one UPDATE; each client
    hears what it would have heard alone: its own record, stored as answered."""
    batch = [create(f"s{i}") for i in range(6)] + [settle(f"s{i}") for i in range(4)]
    with CaptureQueriesContext(connection) as seen:
        answers = together(batch)
    assert answers is not None
    assert writes(seen.captured_queries) == ["INSERT", "WITH"]
    replies = [status_and_data(a) for a in answers]
    assert [s for s, _ in replies] == [200] * 10
    for i in range(6):
        record = replies[i][1]["promise"]
        assert (record["id"], record["state"], record["createdAt"]) == (f"s{i}", "pending", NOW)
    for i in range(4):
        record = replies[6 + i][1]["promise"]
        assert (record["id"], record["state"], record["settledAt"]) == (f"s{i}", "resolved", NOW)
        assert record["value"] == {"headers": {"h": "1"}, "data": "eA=="}
    stored = {p.id: p for p in Promise.objects.all()}
    assert [stored[f"s{i}"].state for i in range(6)] == ["resolved"] * 4 + ["pending"] * 2
    assert stored["s0"].value_headers == {"h": "1"}
    assert (stored["s0"].value_data, stored["s0"].settled_at) == ("eA==", NOW)


def test_what_the_shared_statements_leave_is_answered_as_alone() -> None:
    """An id that exists keeps its record; an absent one is a 404; the first verdict wins; a
    promise past its deadline times out; a targeted promise's settlement fulfils its task; two
    requests for one id run in arrival order."""
    assert together([create("old"), create("late-x", **{"resonate:target": "poll://any@w"})])
    Promise.objects.filter(id="old").update(param_data="b2xk")
    assert together([create("dead"), settle("won", "rejected")]) is not None
    Promise.objects.filter(id="dead").update(timeout_at=NOW - 1)
    answers = together(
        [
            create("old"),
            create("won"),
            settle("won", "rejected"),
            settle("nobody"),
            settle("dead"),
            settle("late-x"),
            create("twice"),
            request("promise.create", id="twice", timeoutAt=FAR, param={"data": "c2Vjb25k"}),
            settle("old", "rejected_canceled"),
        ]
    )
    assert answers is not None
    replies = [status_and_data(a) for a in answers]
    assert [s for s, _ in replies] == [200, 200, 200, 404, 200, 200, 200, 200, 200]
    assert replies[0][1]["promise"]["param"]["data"] == "b2xk"
    assert replies[2][1]["promise"]["state"] == "rejected"
    assert replies[4][1]["promise"]["state"] == "rejected_timedout"
    assert replies[5][1]["promise"]["state"] == "resolved"
    assert Task.objects.get(pk="late-x").state == "fulfilled"
    assert replies[7][1]["promise"]["param"].get("data") is None  # the first create won
    assert replies[8][1]["promise"]["state"] == "rejected_canceled"
    assert Promise.objects.get(id="twice").param_data is None


def test_host_receivers_hear_shared_settlements_once_committed() -> None:
    heard: list[tuple[str, str]] = []

    def receiver(sender: Any, id: str, state: str, **kwargs: Any) -> None:
        heard.append((id, state))

    assert together([create("r1"), create("r2")]) is not None
    promise_settled.connect(receiver)
    try:
        assert together([settle("r1", "rejected"), settle("r2")]) is not None
    finally:
        promise_settled.disconnect(receiver)
    assert sorted(heard) == [("r1", "rejected"), ("r2", "resolved")]


def test_a_narrowed_credential_is_held_to_its_prefix_in_a_shared_statement() -> None:
    _, token = credential_create(name="svc", now=NOW, prefix="app/")
    with override_settings(RESONATE={"AUTH": "required"}):

        def as_service(r: Request) -> Request:
            r.token = token
            return r

        answers = together(
            [as_service(create("app/in")), as_service(create("other/out")), create("app/anon")]
        )
    assert answers is not None
    statuses = [status_and_data(a) for a in answers]
    assert [s for s, _ in statuses] == [200, 403, 401]
    assert "outside this credential's prefix" in statuses[1][1]
    assert list(Promise.objects.values_list("id", flat=True)) == ["app/in"]
