"""Every request kind takes one path: ``api.answer`` hands it to the envelope's threads, which
answer what is waiting together (``api.together``; plain births and settlements of distinct ids
share one statement each). Through that path, on both databases: the answers, refusals and
records a client gets alone and in a batch are the same, credentials are held to their rules,
host receivers hear settlements, and a dropped connection is a 503 the next request recovers
from."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings

from outbox.models import Message
from promises.models import Promise
from resonate_project.access.credentials import credential_create
from resonate_project.core.conf import resonate_settings
from resonate_project.core.signals import promise_settled
from resonate_project.edges import api
from tasks_app.models import Task
from tests.support.factories import FAR

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[api.HandlerThreads]:
    """Requests served as in production: the envelope's thread, in batches."""
    monkeypatch.setenv("RESONATE_WEB_THREADS", "1")
    resonate_settings.cache_clear()
    handlers = api.HandlerThreads(1, batch=32)
    monkeypatch.setattr(api, "_handlers", handlers)
    try:
        yield handlers
    finally:

        async def close_thread_connection() -> None:
            await handlers.run(lambda: connection.close())

        asyncio.run(close_thread_connection())
        handlers.stop()
        monkeypatch.undo()
        resonate_settings.cache_clear()


def envelope(kind: str, head: dict[str, Any] | None = None, **data: Any) -> bytes:
    return json.dumps(
        {"kind": kind, "head": {"corrId": "c", **(head or {})}, "data": data}
    ).encode()


def create(id: str, tags: dict[str, str] | None = None) -> bytes:
    param = {"headers": {}, "data": "e30="}
    return envelope("promise.create", id=id, timeoutAt=FAR, param=param, tags=tags or {})


def settle(id: str, state: str = "resolved") -> bytes:
    return envelope(
        "promise.settle", id=id, state=state, value={"headers": {"h": "1"}, "data": "eA=="}
    )


def serve(*bodies: bytes, auth: str | None = None) -> list[tuple[int, Any]]:
    """Answer each body in turn, as a web process's event loop would."""

    async def main() -> list[tuple[int, Any]]:
        out = []
        for body in bodies:
            status, reply = await api.answer(body, auth)
            out.append((status, json.loads(reply)["data"]))
        return out

    return asyncio.run(main())


def serve_together(*rounds: list[bytes]) -> list[list[tuple[int, Any]]]:
    """Each round's bodies sent at once (so the thread finds them waiting together), the rounds
    one after another."""

    async def main() -> list[list[tuple[int, Any]]]:
        out = []
        for bodies in rounds:
            replies = await asyncio.gather(*(api.answer(b) for b in bodies))
            out.append([(status, json.loads(reply)["data"]) for status, reply in replies])
        return out

    return asyncio.run(main())


def test_plain_create_and_settle_answer_the_same_alone_and_together(
    threads: api.HandlerThreads,
) -> None:
    alone = serve(create("a1"), create("a1"), settle("a1"), settle("a1", "rejected"))
    (born, settled, late) = serve_together(
        [create(f"t{i}") for i in range(8)],
        [settle(f"t{i}") for i in range(8)],
        [settle(f"t{i}", "rejected") for i in range(8)] + [create(f"t{i}") for i in range(8)],
    )

    def strip(answer: tuple[int, Any]) -> tuple[int, Any]:
        status, data = answer
        clock = ("id", "tags", "createdAt", "settledAt")
        record = {k: v for k, v in data["promise"].items() if k not in clock}
        return status, record

    assert {json.dumps(strip(a)) for a in born} == {json.dumps(strip(alone[0]))}
    assert {json.dumps(strip(a)) for a in settled} == {json.dumps(strip(alone[2]))}
    assert [strip(a) for a in late] == [strip(alone[2])] * 16  # the first verdict wins
    assert alone[1] == alone[0]  # idempotent: the stored record, createdAt included
    assert alone[3] == alone[2]
    stored = {p.id: p for p in Promise.objects.all()}
    for i in range(8):
        p = stored[f"t{i}"]
        record = settled[i][1]["promise"]
        assert (p.state, p.value_data, p.settled_at) == ("resolved", "eA==", record["settledAt"])


def test_any_other_promise_gets_its_task_and_messages(threads: api.HandlerThreads) -> None:
    target = {"resonate:target": "poll://any@workers"}
    (born, done, absent) = serve(create("t1", target), settle("t1"), settle("nobody"))
    assert born[0] == 200
    assert done[0] == 200
    assert done[1]["promise"]["state"] == "resolved"
    assert absent == (404, "promise not found")
    assert Task.objects.get(pk="t1").state == "fulfilled"
    assert Message.objects.filter(kind="execute").exists()


def test_refusals_name_the_problem_and_write_nothing(threads: api.HandlerThreads) -> None:
    bodies = [
        settle("p2", "bogus"),
        envelope("promise.create", id="p2", timeoutAt="soon", param={}, tags={}),
        create("p2\x00"),
        envelope("promise.create", {"version": "1999-01-01"}, id="p2", timeoutAt=FAR),
        create("p2", {"resonate:target": 7}),  # type: ignore[dict-item]
    ]
    for answers in (serve(*bodies), *serve_together(bodies)):
        assert [status for status, _ in answers] == [400] * 5
        assert "state must be one of" in answers[0][1]
        assert "timeoutAt" in answers[1][1]
        assert "NUL" in answers[2][1]
        assert "unsupported protocol version" in answers[3][1]
        assert "$.data.tags" in answers[4][1]
    assert not Promise.objects.exists()


def test_the_credential_rules_hold_alone_and_together(threads: api.HandlerThreads) -> None:
    with override_settings(RESONATE={"AUTH": "required"}):
        (missing,) = serve(create("p3"))
        _, token = credential_create(name="svc", now=0, prefix="app/")
        inside, outside = serve(create("app/p3"), create("other/p3"), auth=f"Bearer {token}")

        async def burst() -> list[tuple[int, bytes]]:
            bodies = [create(f"app/b{i}") for i in range(4)] + [
                create(f"other/b{i}") for i in range(4)
            ]
            return list(await asyncio.gather(*(api.answer(b, f"Bearer {token}") for b in bodies)))

        together = asyncio.run(burst())
    assert missing[0] == 401
    assert "authentication required" in missing[1]
    assert inside[0] == 200
    assert outside[0] == 403
    assert "outside this credential's prefix" in outside[1]
    assert [status for status, _ in together] == [200] * 4 + [403] * 4
    ids = set(Promise.objects.values_list("id", flat=True))
    assert ids == {"app/p3", *(f"app/b{i}" for i in range(4))}


def test_host_receivers_hear_each_settlement_alone_and_together(
    threads: api.HandlerThreads,
) -> None:
    heard: list[tuple[str, str]] = []

    def receiver(sender: Any, id: str, state: str, **kwargs: Any) -> None:
        heard.append((id, state))

    promise_settled.connect(receiver)
    try:
        serve(create("p4"), settle("p4", "rejected"))
        serve_together([create(f"q{i}") for i in range(4)], [settle(f"q{i}") for i in range(4)])
    finally:
        promise_settled.disconnect(receiver)
    assert sorted(heard) == [("p4", "rejected"), *((f"q{i}", "resolved") for i in range(4))]


@pytest.mark.postgres
def test_a_dropped_database_connection_is_a_503_and_the_next_requests_succeed(
    threads: api.HandlerThreads,
) -> None:
    async def main() -> list[int]:
        await asyncio.gather(*(api.answer(create(f"warm-{k}")) for k in range(4)))
        await asyncio.to_thread(terminate_other_backends)
        statuses = []
        for i in range(6):
            status, _ = await api.answer(create(f"after-{i}"))
            statuses.append(status)
        return statuses

    statuses = asyncio.run(main())
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(503) <= 1  # the thread's one connection, at most once
    assert statuses[-3:] == [200, 200, 200]
    created = {f"after-{i}" for i, s in enumerate(statuses) if s == 200}
    assert created <= set(Promise.objects.values_list("id", flat=True))


def terminate_other_backends() -> None:
    """Drop the envelope thread's connection, as a database restart or a network failure
    would (every connection to the test database but this one)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
    finally:
        connection.close()  # this thread's own


# --- task.fence with a plain inner action -------------------------------------------------------


def root_tags(root: str, scope: str, target: bool) -> dict[str, str]:
    """Tags as the Python SDK writes them for a workflow (target) and its ctx.run steps."""
    tags = {
        "resonate:origin": root,
        "resonate:branch": root,
        "resonate:parent": root,
        "resonate:scope": scope,
    }
    if target:
        tags["resonate:target"] = "poll://any@workers"
    return tags


def action_create(id: str, root: str, target: bool = False) -> dict[str, Any]:
    param = {"headers": {}, "data": "e30="}
    data = {"id": id, "timeoutAt": FAR, "param": param, "tags": root_tags(root, "local", target)}
    return {"kind": "promise.create", "head": {"corrId": "inner"}, "data": data}


def action_settle(id: str, state: str = "resolved") -> dict[str, Any]:
    data = {"id": id, "state": state, "value": {"headers": {}, "data": "eA=="}}
    return {"kind": "promise.settle", "head": {"corrId": "inner"}, "data": data}


def fence(root: str, action: dict[str, Any], version: int = 1) -> bytes:
    return envelope("task.fence", id=root, version=version, action=action)


def cycle(root: str) -> list[bytes]:
    """The SDK-shaped workflow of bench/lua/task_cycle.lua: two ctx.run steps, then done."""
    create_root = action_create(root, root, target=True)
    create_root["data"]["tags"]["resonate:scope"] = "global"
    return [
        envelope("task.create", pid="w", ttl=60_000, action=create_root),
        fence(root, action_create(f"{root}:1", root)),
        fence(root, action_settle(f"{root}:1")),
        fence(root, action_create(f"{root}:2", root)),
        fence(root, action_settle(f"{root}:2")),
        envelope("task.fulfill", id=root, version=1, action=action_settle(root)),
    ]


def shape(answers: list[tuple[int, Any]], root: str) -> list[Any]:
    """What a client reads from each answer, with the run's own ids and clock taken out."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("createdAt", "settledAt")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, str):
            return value.replace(root, "ROOT")
        return value

    return [(status, strip(data)) for status, data in answers]


def test_an_sdk_workflow_answers_the_same_alone_and_batched_with_others(
    threads: api.HandlerThreads,
) -> None:
    alone = serve(*cycle("wf-alone"))
    roots = [f"wf-{i}" for i in range(6)]
    rounds = serve_together(*([cycle(root)[step] for root in roots] for step in range(6)))
    for i, root in enumerate(roots):
        assert shape([r[i] for r in rounds], root) == shape(alone, "wf-alone")
    second_create = alone[3][1]
    assert second_create["action"]["head"]["status"] == 200
    # The branch as it stands after the write: the settled first step, the new second.
    preloaded = [(r["id"], r["state"]) for r in second_create["preload"]]
    assert preloaded == [("wf-alone:1", "resolved"), ("wf-alone:2", "pending")]
    stored = dict(Promise.objects.filter(id__startswith="wf-alone").values_list("id", "state"))
    assert stored == {"wf-alone": "resolved", "wf-alone:1": "resolved", "wf-alone:2": "resolved"}


def test_a_refused_fence_writes_nothing(threads: api.HandlerThreads) -> None:
    steps = cycle("wf")
    answers = serve(
        steps[0],
        fence("wf", action_create("wf:1", "wf"), version=7),  # 409: wrong version
        fence("nobody", action_create("wf:2", "wf")),  # 404: no such task
        fence("wf", action_settle("wf:3")),  # inner 404: no such promise
        fence("wf", action_create("wf:4", "wf")),
        fence("wf", action_settle("wf:4", "bogus")),  # inner 400: bad state
    )
    statuses = [status for status, _ in answers]
    assert statuses == [200, 409, 404, 200, 200, 200]
    assert "version mismatch" in answers[1][1]
    assert answers[2][1] == "task not found"
    assert answers[3][1]["action"]["head"]["status"] == 404
    assert answers[5][1]["action"]["head"]["status"] == 400
    assert "state must be one of" in answers[5][1]["action"]["data"]
    assert set(Promise.objects.values_list("id", flat=True)) == {"wf", "wf:4"}
    assert Promise.objects.get(id="wf:4").state == "pending"
