"""Plain promise.create and promise.settle answered on the event loop (``engine.aio``), on
PostgreSQL: the same answers, refusals and records as on the envelope's threads, every other
request handed to the threads unchanged, a database failure a 503 the next request recovers
from, and the connections closed at the ASGI lifespan's shutdown."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
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
from resonate_project.embed.asgi import wrap
from resonate_project.engine import aio
from tasks_app.models import Task
from tests.support.factories import FAR

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


class CountingThreads(api.HandlerThreads):
    """The envelope's thread, counting the requests handed to it."""

    def __init__(self) -> None:
        super().__init__(1)
        self.calls = 0

    def run(self, call: Callable[[], Any] | api.Request) -> asyncio.Future[Any]:
        self.calls += 1
        return super().run(call)


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingThreads]:
    """Requests served as in production: one envelope thread (counted), the loop path on."""
    monkeypatch.setenv("RESONATE_WEB_THREADS", "1")
    monkeypatch.delenv("RESONATE_LOOP_CONNECTIONS", raising=False)
    resonate_settings.cache_clear()
    handlers = CountingThreads()
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
    """Answer each body in turn on one event loop, as a web process would, then close its
    connections."""

    async def main() -> list[tuple[int, Any]]:
        out = []
        aio.start()  # as the ASGI lifespan's startup does
        try:
            for body in bodies:
                status, reply = await api.answer(body, auth)
                out.append((status, json.loads(reply)["data"]))
        finally:
            await aio.close()
        return out

    return asyncio.run(main())


def test_plain_create_and_settle_answer_on_the_loop_with_the_threads_answers(
    threads: CountingThreads,
) -> None:
    (created, again, settled, late, read) = serve(
        create("p1"),
        create("p1"),
        settle("p1"),
        settle("p1", "rejected"),
        envelope("promise.get", id="p1"),
    )
    assert threads.calls == 2  # promise.get, and the late settle (the threads decide those)
    assert created[0] == 200
    assert created[1]["promise"]["state"] == "pending"
    assert again == created  # idempotent: the stored record, createdAt included
    assert settled[0] == 200
    assert settled[1]["promise"]["state"] == "resolved"
    assert settled[1]["promise"]["value"] == {"headers": {"h": "1"}, "data": "eA=="}
    assert late == settled  # the first verdict wins
    assert read == settled  # what the threads read is what the loop wrote
    p = Promise.objects.get(id="p1")
    assert (p.state, p.value_data, p.settled_at) == (
        "resolved",
        "eA==",
        settled[1]["promise"]["settledAt"],
    )


def test_any_other_promise_is_handed_to_the_threads_and_gets_its_task_and_messages(
    threads: CountingThreads,
) -> None:
    target = {"resonate:target": "poll://any@workers"}
    (born, done, absent) = serve(create("t1", target), settle("t1"), settle("nobody"))
    assert born[0] == 200
    assert done[0] == 200
    assert done[1]["promise"]["state"] == "resolved"
    assert absent == (404, "promise not found")
    assert threads.calls == 3
    assert Task.objects.get(pk="t1").state == "fulfilled"
    assert Message.objects.filter(kind="execute").exists()


def test_refusals_on_the_loop_name_the_problem_and_write_nothing(
    threads: CountingThreads,
) -> None:
    answers = serve(
        settle("p2", "bogus"),
        envelope("promise.create", id="p2", timeoutAt="soon", param={}, tags={}),
        create("p2\x00"),
        envelope("promise.create", {"version": "1999-01-01"}, id="p2", timeoutAt=FAR),
        create("p2", {"resonate:target": 7}),  # type: ignore[dict-item]
    )
    assert [status for status, _ in answers] == [400] * 5
    assert "state must be one of" in answers[0][1]
    assert "timeoutAt" in answers[1][1]
    assert "NUL" in answers[2][1]
    assert "unsupported protocol version" in answers[3][1]
    assert "$.data.tags" in answers[4][1]
    assert not Promise.objects.exists()


def test_the_loop_applies_the_credential_rules(threads: CountingThreads) -> None:
    with override_settings(RESONATE={"AUTH": "required"}):
        (missing,) = serve(create("p3"))
        _, token = credential_create(name="svc", now=int(time.time() * 1000), prefix="app/")
        inside, outside = serve(create("app/p3"), create("other/p3"), auth=f"Bearer {token}")
    assert missing[0] == 401
    assert "authentication required" in missing[1]
    assert inside[0] == 200
    assert outside[0] == 403
    assert "outside this credential's prefix" in outside[1]
    assert list(Promise.objects.values_list("id", flat=True)) == ["app/p3"]


def test_host_receivers_still_hear_a_plain_settlement(threads: CountingThreads) -> None:
    heard: list[tuple[str, str]] = []

    def receiver(sender: Any, id: str, state: str, **kwargs: Any) -> None:
        heard.append((id, state))

    promise_settled.connect(receiver)
    try:
        serve(create("p4"), settle("p4", "rejected"))
    finally:
        promise_settled.disconnect(receiver)
    assert heard == [("p4", "rejected")]


def test_a_dropped_database_connection_is_a_503_and_the_next_requests_succeed(
    threads: CountingThreads,
) -> None:
    async def main() -> list[int]:
        statuses = []
        aio.start()
        try:
            for i in range(2):  # both of the loop's connections open
                await asyncio.gather(*(api.answer(create(f"warm{i}-{k}")) for k in range(4)))
            await asyncio.to_thread(terminate_loop_backends)
            for i in range(6):
                status, _ = await api.answer(create(f"after-{i}"))
                statuses.append(status)
        finally:
            await aio.close()
        return statuses

    statuses = asyncio.run(main())
    assert set(statuses) <= {200, 503}, statuses
    assert statuses.count(503) <= aio.loop_connections()  # one per dropped connection at most
    assert statuses[-3:] == [200, 200, 200]
    created = {f"after-{i}" for i, s in enumerate(statuses) if s == 200}
    assert created <= set(Promise.objects.values_list("id", flat=True))


def terminate_loop_backends() -> None:
    """Drop the loop's connections, as a database restart or a network failure would."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = %s",
                [aio.APPLICATION_NAME],
            )
    finally:
        connection.close()  # this thread's own


def test_a_loop_without_the_lifespan_sends_every_request_to_the_threads(
    threads: CountingThreads,
) -> None:
    """Django's async view under WSGI runs each request in an event loop of its own: such a loop
    gets no connections (they would outlive it), so its requests take the threads."""

    async def one(body: bytes) -> int:
        status, _ = await api.answer(body)
        return status

    assert asyncio.run(one(create("w1"))) == 200
    assert asyncio.run(one(settle("w1"))) == 200
    assert threads.calls == 2
    assert backends() == 0
    assert Promise.objects.get(id="w1").state == "resolved"


def test_the_lifespan_gives_the_loop_its_connections_and_closes_them(
    threads: CountingThreads,
) -> None:
    app = wrap(lambda *args: None, steps=False)
    app.start = app.stop = lambda: None  # type: ignore[method-assign]  # no flusher thread here

    async def main() -> tuple[int, int, int]:
        before = await asyncio.to_thread(backends)
        messages = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
        sent: list[str] = []

        async def receive() -> dict[str, str]:
            message = next(messages)
            if message["type"] == "lifespan.shutdown":
                await asyncio.gather(*(api.answer(create(f"l{k}")) for k in range(4)))
                during.append(await asyncio.to_thread(backends))
            return message

        async def send(message: dict[str, str]) -> None:
            sent.append(message["type"])

        during: list[int] = []
        await app({"type": "lifespan"}, receive, send)
        assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
        after = await asyncio.to_thread(backends_settled, before)
        return before, during[0], after

    before, during, after = asyncio.run(main())
    assert (before, during, after) == (0, aio.loop_connections(), 0)


def backends() -> int:
    """The loop's connections to the test database open now."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = %s",
                [aio.APPLICATION_NAME],
            )
            (count,) = cursor.fetchone()
    finally:
        connection.close()  # this thread's own
    return int(count)


def backends_settled(expected: int, wait_s: float = 10.0) -> int:
    """The backend count once it is ``expected`` (a closed backend leaves the view shortly after),
    or as it stands after ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while (count := backends()) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


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


def test_a_fenced_plain_step_answers_on_the_loop_exactly_as_on_the_threads(
    threads: CountingThreads, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_loop = serve(*cycle("wf-loop"))
    assert threads.calls == 2  # task.create and task.fulfill; the four fences on the loop
    monkeypatch.setenv("RESONATE_LOOP_CONNECTIONS", "0")
    resonate_settings.cache_clear()
    on_threads = serve(*cycle("wf-threads"))
    assert threads.calls == 2 + 6
    assert shape(on_loop, "wf-loop") == shape(on_threads, "wf-threads")
    second_create = on_loop[3][1]
    assert second_create["action"]["head"]["status"] == 200
    # The branch as it stands after the write: the settled first step, the new second.
    preloaded = [(r["id"], r["state"]) for r in second_create["preload"]]
    assert preloaded == [("wf-loop:1", "resolved"), ("wf-loop:2", "pending")]
    stored = dict(Promise.objects.filter(id__startswith="wf-loop").values_list("id", "state"))
    assert stored == {"wf-loop": "resolved", "wf-loop:1": "resolved", "wf-loop:2": "resolved"}


def test_a_fence_refused_on_the_loop_writes_nothing(threads: CountingThreads) -> None:
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
    assert threads.calls == 1  # task.create only
    assert set(Promise.objects.values_list("id", flat=True)) == {"wf", "wf:4"}
    assert Promise.objects.get(id="wf:4").state == "pending"


def test_a_fence_on_a_promise_that_is_not_plain_is_left_to_the_threads(
    threads: CountingThreads,
) -> None:
    steps = cycle("wf")
    external = action_create("wf:ext", "wf")
    external["data"]["tags"]["resonate:scope"] = "global"  # an SDK promise awaited externally
    answers = serve(
        steps[0],
        fence("wf", action_create("wf:child", "wf", target=True)),  # an rpc: gets a task
        fence("wf", external),
        fence("wf", action_settle("wf:ext")),
    )
    assert [status for status, _ in answers] == [200] * 4
    assert [a["action"]["head"]["status"] for _, a in answers[1:]] == [200] * 3
    assert Task.objects.filter(pk="wf:child").exists()
    assert Promise.objects.get(id="wf:ext").state == "resolved"
    assert threads.calls == 4  # task.create and each of the three fences
