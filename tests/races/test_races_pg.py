"""Races on PostgreSQL: real concurrent transactions, one connection per thread.

Threads start together behind a barrier; every assertion is about the outcome (who won, what
every later read agrees on, that nothing was done twice), never about timing.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction

from outbox import delivery
from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.core.clock import now_ms
from resonate_project.core.protocol import Response
from resonate_project.edges.envelope import call
from resonate_project.engine import outbox as enqueue
from resonate_project.engine import steps
from tasks_app import jobs
from tasks_app.models import Task
from tests import tasksapp_fixtures as fixtures
from tests.django_tasks.test_django_tasks import configure
from tests.support.factories import FAR

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

TARGET = "resonate:target"
JOIN_TIMEOUT_S = 120


def race(n: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(0..n-1)`` in n threads released together; re-raise any thread's exception."""
    barrier = threading.Barrier(n)
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            connection.ensure_connection()  # connect before the barrier so the start is even
            barrier.wait(timeout=JOIN_TIMEOUT_S)
            results[i] = work(i)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "a racing thread hung"
    if errors:
        raise errors[0]
    return results


def ok(kind: str, now: int, **data: Any) -> Response:
    res = call(kind, data, now)
    assert res.status == 200, (kind, data, res)
    return res


def acquired_task(tid: str, now: int = 1_000) -> None:
    action = {
        "kind": "promise.create",
        "data": {"id": tid, "timeoutAt": FAR, "tags": {TARGET: "w"}},
    }
    res = ok("task.create", now, pid=f"owner-{tid}", ttl=600_000, action=action)
    assert res.data["task"]["version"] == 1


def test_sixteen_acquires_of_one_task_have_exactly_one_winner() -> None:
    ok("promise.create", 1_000, id="job", timeoutAt=FAR, tags={TARGET: "poll://any@g"})

    def acquire(i: int) -> Response:
        return call(
            "task.acquire", {"id": "job", "version": 0, "pid": f"w{i}", "ttl": 60_000}, 2_000
        )

    results = race(16, acquire)
    statuses = Counter(r.status for r in results)
    assert statuses == Counter({200: 1, 409: 15}), results
    winner = next(i for i, r in enumerate(results) if r.status == 200)
    task = Task.objects.get(promise_id="job")
    assert (task.state, task.version, task.pid) == ("acquired", 1, f"w{winner}")
    assert results[winner].data["task"]["version"] == 1
    assert all(isinstance(r.data, str) for r in results if r.status == 409)


def test_settle_racing_the_timeout_step_at_the_deadline_has_one_outcome_everyone_reads() -> None:
    deadline = 10_000
    for i in range(24):
        pid, awaiter, address = f"b{i:02}", f"w{i:02}", f"poll://uni@g/{i}"
        ok("promise.create", 1_000, id=pid, timeoutAt=deadline, tags={TARGET: "poll://any@g"})
        ok("promise.register_listener", 1_000, awaited=pid, address=address)
        acquired_task(awaiter)
        actions = [
            {"kind": "promise.register_callback", "data": {"awaited": pid, "awaiter": awaiter}}
        ]
        assert (
            call("task.suspend", {"id": awaiter, "version": 1, "actions": actions}, 1_000).status
            == 200
        )

        def contend(who: int, pid: str = pid) -> Any:
            if who == 0:
                return call("promise.settle", {"id": pid, "state": "resolved"}, deadline - 1)
            return steps.promise_timeouts(deadline, 100)

        settle_res, _ = race(2, contend)
        assert settle_res.status == 200
        steps.run_due(deadline, 100)  # drains whatever a busy row left for the steps

        later = deadline + 1
        record = ok("promise.get", later, id=pid).data["promise"]
        assert record["state"] in ("resolved", "rejected_timedout"), record
        expected_at = deadline - 1 if record["state"] == "resolved" else deadline
        assert record["settledAt"] == expected_at
        assert settle_res.data["promise"] == record  # the settle saw the same single outcome
        assert ok("task.get", later, id=pid).data["task"]["state"] == "fulfilled"
        found = ok("promise.search", later, state=record["state"], tags={TARGET: "poll://any@g"})
        assert record in found.data["promises"]
        other = "rejected_timedout" if record["state"] == "resolved" else "resolved"
        found = ok("promise.search", later, state=other)
        assert pid not in [r["id"] for r in found.data["promises"]]
        stored = Promise.objects.get(id=pid)
        assert (stored.state, stored.settled_at) == (record["state"], record["settledAt"])
        # Settled exactly once: one unblock, written once, carrying that record; one wake.
        unblock = Message.objects.get(key=f"{pid}:notify:{address}")
        assert (unblock.revision, unblock.promise) == (1, record)
        assert not Listener.objects.filter(awaited_id=pid).exists()
        assert not Callback.objects.filter(awaited_id=pid).exists()
        woken = Task.objects.get(promise_id=awaiter)
        assert (woken.state, woken.version, woken.resumes) == ("pending", 1, [pid])


def test_eight_creates_of_one_promise_all_answer_the_single_stored_record() -> None:
    def create(i: int) -> Response:
        data = {
            "id": "same",
            "timeoutAt": FAR,
            "param": {"data": f"cmVxdWVzdC{i}"},
            "tags": {TARGET: "poll://any@g"},
        }
        return call("promise.create", data, 1_000 + i)

    results = race(8, create)
    assert [r.status for r in results] == [200] * 8, results
    assert Promise.objects.filter(id="same").count() == 1
    assert Task.objects.filter(promise_id="same").count() == 1
    stored = ok("promise.get", 2_000, id="same").data["promise"]
    assert all(r.data["promise"] == stored for r in results)
    assert Message.objects.get(key="same").revision == 1  # dispatched once, by the winner


def test_eight_creates_of_one_plain_promise_all_answer_the_single_stored_record() -> None:
    # No target, not external: each create is one autocommit statement (no transaction around).
    def create(i: int) -> Response:
        data = {"id": "plain", "timeoutAt": FAR, "param": {"data": f"cmVxdWVzdC{i}"}}
        return call("promise.create", data, 1_000 + i)

    results = race(8, create)
    assert [r.status for r in results] == [200] * 8, results
    assert Promise.objects.filter(id="plain").count() == 1
    stored = ok("promise.get", 2_000, id="plain").data["promise"]
    assert all(r.data["promise"] == stored for r in results)


def test_eight_settles_of_one_plain_promise_have_one_verdict_everyone_reads() -> None:
    ok("promise.create", 1_000, id="verdict", timeoutAt=FAR)
    states = ["resolved", "rejected", "rejected_canceled", "resolved"] * 2

    def settle(i: int) -> Response:
        value = {"data": f"dmFsdWU{i}"}
        return call("promise.settle", {"id": "verdict", "state": states[i], "value": value}, 2_000)

    results = race(8, settle)
    assert [r.status for r in results] == [200] * 8, results
    stored = ok("promise.get", 3_000, id="verdict").data["promise"]
    assert stored["state"] in ("resolved", "rejected", "rejected_canceled")
    assert all(r.data["promise"] == stored for r in results)  # all read the one winner's record


def test_a_plain_settle_just_before_its_deadline_wins_whatever_the_timeout_step_does() -> None:
    deadline = 10_000
    for i in range(24):
        pid = f"plain-deadline-{i:02}"
        ok("promise.create", 1_000, id=pid, timeoutAt=deadline)

        def contend(who: int, pid: str = pid) -> Any:
            if who == 0:
                return call("promise.settle", {"id": pid, "state": "resolved"}, deadline - 1)
            return steps.promise_timeouts(deadline, 100)

        settle_res, _ = race(2, contend)
        record = ok("promise.get", deadline + 1, id=pid).data["promise"]
        assert (record["state"], record["settledAt"]) == ("resolved", deadline - 1), record
        assert settle_res.data["promise"] == record


def test_eight_task_creates_of_one_id_have_exactly_one_winner() -> None:
    def create(i: int) -> Response:
        action = {
            "kind": "promise.create",
            "data": {"id": "solo", "timeoutAt": FAR, "tags": {TARGET: "poll://any@g"}},
        }
        return call("task.create", {"pid": f"w{i}", "ttl": 60_000, "action": action}, 1_000)

    results = race(8, create)
    assert Counter(r.status for r in results) == Counter({200: 1, 409: 7}), results
    winner = next(i for i, r in enumerate(results) if r.status == 200)
    assert Promise.objects.filter(id="solo").count() == 1
    task = Task.objects.get(promise_id="solo")
    assert (task.state, task.version, task.pid) == ("acquired", 1, f"w{winner}")


def test_eight_task_creates_re_acquiring_one_pending_task_have_exactly_one_winner() -> None:
    ok("promise.create", 1_000, id="again", timeoutAt=FAR, tags={TARGET: "poll://any@g"})

    def create(i: int) -> Response:
        action = {
            "kind": "promise.create",
            "data": {"id": "again", "timeoutAt": FAR, "tags": {TARGET: "poll://any@g"}},
        }
        return call("task.create", {"pid": f"w{i}", "ttl": 60_000, "action": action}, 2_000)

    results = race(8, create)
    assert Counter(r.status for r in results) == Counter({200: 1, 409: 7}), results
    task = Task.objects.get(promise_id="again")
    assert (task.state, task.version) == ("acquired", 1)


def test_crossing_suspends_and_settles_never_fail_and_never_lose_a_wake() -> None:
    for i in range(30):
        x, y, p, q = f"x{i:02}", f"y{i:02}", f"p{i:02}", f"q{i:02}"
        acquired_task(x)
        acquired_task(y)
        for pid in (p, q):
            ok("promise.create", 1_000, id=pid, timeoutAt=FAR, tags={"resonate:external": "true"})

        def suspend(tid: str, awaited: list[str]) -> Response:
            actions = [
                {"kind": "promise.register_callback", "data": {"awaited": a, "awaiter": tid}}
                for a in awaited
            ]
            return call("task.suspend", {"id": tid, "version": 1, "actions": actions}, 2_000)

        def settle(pid: str) -> Response:
            return call("promise.settle", {"id": pid, "state": "resolved"}, 2_000)

        def cross(k: int, x: str = x, y: str = y, p: str = p, q: str = q) -> Response:
            if k == 0:
                return suspend(x, [p, q])
            if k == 1:
                return suspend(y, [q, p])
            return settle(p if k == 2 else q)

        results = race(4, cross)
        assert [r.status in (200, 300) for r in results[:2]] == [True, True], results
        assert [r.status for r in results[2:]] == [200, 200], results
        steps.run_due(2_000, 100)  # awaiters busy at settlement are resumed by the step
        for tid, res in ((x, results[0]), (y, results[1])):
            task = Task.objects.get(promise_id=tid)
            if res.status == 300:
                assert (task.state, task.version) == ("acquired", 1), (tid, task.state)
            else:
                assert (task.state, task.version) == ("pending", 1), (tid, task.state)
                assert task.resumes, (tid, "woken without a resume")
                assert set(task.resumes) <= {p, q}, task.resumes
                execute = Message.objects.get(key=tid)
                assert (execute.kind, execute.version) == ("execute", 1)
        assert not Callback.objects.filter(awaited_id__in=[p, q]).exists()


def test_concurrent_django_task_claims_never_share_a_call(settings: Any) -> None:
    """Eight workers claim from one queue of 40 calls at once, again and again: every call is
    claimed once, by one worker, at attempt 1 (SKIP LOCKED, then task.acquire's fence)."""
    configure(settings)
    ids = {fixtures.add.enqueue(i, i).id for i in range(40)}
    now = now_ms() + 1_000

    def claim_all(i: int) -> list[tuple[str, int]]:
        mine: list[tuple[str, int]] = []
        while True:
            claimed = jobs.job_claim(
                backend="default",
                queues=["default"],
                pid=f"w{i}",
                ttl=600_000,
                now=now,
                limit=3,
            )
            if not claimed:
                return mine
            mine += [(view.id, view.version) for view in claimed]

    claims = [c for mine in race(8, claim_all) for c in mine]
    assert Counter(id for id, _ in claims) == dict.fromkeys(ids, 1)
    assert {version for _, version in claims} == {1}


def test_concurrent_stream_claims_never_share_a_message() -> None:
    """Eight SSE hubs (one per thread) claim one group's 200 messages at once, a few at a time:
    every message is leased once, at revision 2 (its claim), and the rows say the same."""
    now = now_ms()
    for i in range(200):
        enqueue.unblock({"id": f"race-{i}", "state": "resolved"}, "poll://any@racers", now)
    routes = ["racers"]

    def claim_all(i: int) -> list[tuple[str, int]]:
        mine: list[tuple[str, int]] = []
        while True:
            claimed = delivery.claim_routes(routes, now_ms(), 7, 60_000)
            if not claimed:
                return mine
            mine += [(item.key, item.revision) for item in claimed]

    claims = [c for mine in race(8, claim_all) for c in mine]
    assert len(claims) == 200
    assert len({key for key, _ in claims}) == 200
    assert {revision for _, revision in claims} == {2}
    assert set(Message.objects.values_list("revision", "attempts")) == {(2, 1)}


def test_a_settle_whose_update_missed_a_create_committing_meanwhile_settles_it() -> None:
    """Found by the linearizability run (tests/system/test_linearizability.py): under READ
    COMMITTED the settle's ``UPDATE … WHERE state = 'pending'`` passes over a row whose creator
    has not committed, without waiting; if the creator commits before the settle's next read,
    that read sees the promise pending. The settle must then settle it (or, had it not seen it,
    answer 404), never answer 200 with the record still pending."""
    inserted, go, committed = threading.Event(), threading.Event(), threading.Event()
    now = now_ms()

    def creator() -> None:
        try:
            with transaction.atomic():
                made = call("promise.create", {"id": "raced", "timeoutAt": FAR, "tags": {}}, now)
                assert made.status == 200
                inserted.set()
                assert go.wait(JOIN_TIMEOUT_S)
            committed.set()
        finally:
            connection.close()

    def after_the_update(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if sql.lstrip().upper().startswith("UPDATE") and "raced" in str(params) and not go.is_set():
            go.set()  # the UPDATE matched nothing: let the creator commit before the next read
            assert committed.wait(JOIN_TIMEOUT_S)
        return result

    thread = threading.Thread(target=creator)
    thread.start()
    try:
        assert inserted.wait(JOIN_TIMEOUT_S)
        value = {"headers": {}, "data": "eA=="}
        with connection.execute_wrapper(after_the_update):
            res = call("promise.settle", {"id": "raced", "state": "resolved", "value": value}, now)
    finally:
        go.set()
        thread.join(JOIN_TIMEOUT_S)
    assert committed.is_set()  # the interleaving happened as described
    assert res.status == 200
    assert res.data["promise"]["state"] == "resolved"
    assert Promise.objects.get(id="raced").state == "resolved"


def test_batches_locking_the_same_promises_in_opposite_orders_answer_every_request() -> None:
    """Two envelope threads' batches (group commit) settle the same targeted promises, each
    settlement holding its row until the batch commits, one batch in the reverse order of the
    other: PostgreSQL may find a deadlock and abort one, which is then answered request by
    request. No request is answered with an error, and each promise has one verdict."""
    import contextvars
    import json as jsonlib

    from resonate_project.edges.api import Request, answer_batch
    from resonate_project.edges.envelope import Envelope, parse
    from resonate_project.observability.request import RequestObservation

    ids = [f"lock-{i}" for i in range(12)]
    now = now_ms()
    for id in ids:
        tags = {TARGET: "poll://any@workers"}
        assert call("promise.create", {"id": id, "timeoutAt": FAR, "tags": tags}, now).status == 200

    def settle(id: str, state: str) -> Request:
        body = {"kind": "promise.settle", "data": {"id": id, "state": state, "value": {}}}
        env = parse(jsonlib.dumps(body).encode())
        assert isinstance(env, Envelope)
        return Request(contextvars.copy_context().run, env, now_ms(), None, RequestObservation())

    def batch(i: int) -> list[int]:
        order = ids if i == 0 else ids[::-1]
        state = "resolved" if i == 0 else "rejected"
        outcomes = answer_batch([settle(id, state) for id in order])
        return [result[0] for result, error in outcomes if error is None]

    statuses = race(2, batch)
    assert statuses == [[200] * len(ids), [200] * len(ids)]
    states = dict(Promise.objects.filter(id__in=ids).values_list("id", "state"))
    assert set(states.values()) <= {"resolved", "rejected"}
    assert len(states) == len(ids)
    assert set(Task.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"fulfilled"}
