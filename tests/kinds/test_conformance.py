"""One test per conformance question C1 … C11 (spec digest §8.1).

Each test drives the scenario in which another implementation gave the wrong answer (§8.4, §8.5)
and asserts what a client, or a worker reading the outbox, would observe. Times are ms.
"""

from __future__ import annotations

from typing import Any

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.engine.steps import (
    callback_drain,
    lease_expiry,
    listener_drain,
    promise_timeouts,
    retry_dispatch,
    run_due,
)
from tasks_app.models import Task
from tests.support.factories import FAR, Api

TARGET = {"resonate:target": "poll://any@workers"}
EXTERNAL = {"resonate:external": "true"}
TIMER = {"resonate:timer": "true"}
LISTENER = "poll://uni@workers/client-1"
BATCH = 100


def create_action(promise_id: str, timeout_at: int, tags: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "promise.create",
        "head": {},
        "data": {"id": promise_id, "timeoutAt": timeout_at, "param": {}, "tags": tags},
    }


def settle_action(promise_id: str, state: str = "resolved") -> dict[str, Any]:
    return {
        "kind": "promise.settle",
        "head": {},
        "data": {"id": promise_id, "state": state, "value": {}},
    }


def callback_action(awaited: str, awaiter: str) -> dict[str, Any]:
    return {
        "kind": "promise.register_callback",
        "head": {},
        "data": {"awaited": awaited, "awaiter": awaiter},
    }


def start_workflow(
    api: Api, task_id: str, timeout_at: int = FAR, ttl: int = 60_000, now: int = 1_000
) -> None:
    """A workflow task acquired by its creator at version 1 (task.create)."""
    res = api(
        "task.create",
        now=now,
        pid="worker-1",
        ttl=ttl,
        action=create_action(task_id, timeout_at, TARGET),
    )
    assert res.status == 200
    assert res.data["task"]["state"] == "acquired"


def suspend_on(api: Api, task_id: str, version: int, *awaited: str, now: int = 1_000) -> int:
    res = api(
        "task.suspend",
        now=now,
        id=task_id,
        version=version,
        actions=[callback_action(a, task_id) for a in awaited],
    )
    return res.status


def stored_task(task_id: str) -> Task:
    return Task.objects.get(pk=task_id)


def execute_for(task_id: str) -> Message | None:
    return Message.objects.filter(kind="execute", task_id=task_id).first()


def run_every_step(now: int) -> None:
    run_due(now, BATCH)


def assert_outbox_not_ahead() -> None:
    """OutboxNeverAhead: every execute names a version the task has already reached."""
    for m in Message.objects.filter(kind="execute"):
        assert m.version is not None
        assert m.version <= stored_task(str(m.task_id)).version, m.key


# --- C1 ---------------------------------------------------------------------------------------


def test_c1_only_external_promises_get_a_durable_timeout(api: Api) -> None:
    # Under-arming side (resonate BUG-1): an untargeted external promise and an untargeted timer
    # are awaited by suspended workflows. Nobody reads them; the timeout step alone must settle
    # them at their deadline and wake the awaiters.
    api("promise.create", id="ext", timeoutAt=5_000, tags=EXTERNAL)
    api("promise.create", id="sleep", timeoutAt=5_000, tags=TIMER)
    start_workflow(api, "wf-ext")
    start_workflow(api, "wf-sleep")
    assert suspend_on(api, "wf-ext", 1, "ext") == 200
    assert suspend_on(api, "wf-sleep", 1, "sleep") == 200
    # Over-arming side (convex): an internal promise (an SDK ctx.run child) with the same deadline.
    api("promise.create", id="local", timeoutAt=5_000, tags={"resonate:scope": "local"})

    assert promise_timeouts(5_000, BATCH) == 2

    ext, sleep = Promise.objects.get(pk="ext"), Promise.objects.get(pk="sleep")
    assert (ext.state, ext.settled_at) == ("rejected_timedout", 5_000)
    assert (sleep.state, sleep.settled_at) == ("resolved", 5_000)
    for awaiter in ("wf-ext", "wf-sleep"):
        task = api("task.get", now=5_000, id=awaiter).data["task"]
        assert (task["state"], task["version"], task["resumes"]) == ("pending", 1, 1)
        message = execute_for(awaiter)
        assert message is not None
        assert (message.version, message.address) == (1, TARGET["resonate:target"])

    # The internal promise is never materialised by any step: only its projection says settled.
    run_every_step(10_000)
    assert Promise.objects.get(pk="local").state == "pending"
    local = api("promise.get", now=10_000, id="local").data["promise"]
    assert (local["state"], local["settledAt"]) == ("rejected_timedout", 5_000)


# --- C2 ---------------------------------------------------------------------------------------


def test_c2_register_callback_refuses_an_internal_awaited(api: Api) -> None:
    api("promise.create", id="local", timeoutAt=FAR, tags={"resonate:scope": "local"})
    api("promise.create", id="plain", timeoutAt=FAR, tags={})
    start_workflow(api, "wf")

    for awaited in ("local", "plain"):
        res = api("promise.register_callback", awaited=awaited, awaiter="wf")
        assert res.status == 422, awaited
    # Suspending on an internal promise would record the same callback: refused too.
    assert suspend_on(api, "wf", 1, "local") == 422

    assert not Callback.objects.exists()
    task = api("task.get", id="wf").data["task"]
    assert task["state"] == "acquired"


# --- C3 ---------------------------------------------------------------------------------------


def test_c3_register_listener_refuses_an_internal_awaited(api: Api) -> None:
    api("promise.create", id="local", timeoutAt=5_000, tags={"resonate:scope": "local"})

    res = api("promise.register_listener", awaited="local", address=LISTENER)

    assert res.status == 422
    assert not Listener.objects.exists()
    # pg BUG-1: the stranded listener would never be told. Nothing is owed to anyone.
    api("promise.settle", now=2_000, id="local", state="resolved", value={})
    run_every_step(10_000)
    assert not Message.objects.filter(kind="unblock").exists()


# --- C4 ---------------------------------------------------------------------------------------


def test_c4_task_create_halt_and_continue_gate_on_the_projected_promise(api: Api) -> None:
    # Three targeted promises whose tasks were never claimed (pending v0), deadline 5000.
    for pid in ("created", "halted", "continued"):
        api("promise.create", id=pid, timeoutAt=5_000, tags=TARGET)
    assert api("task.halt", now=2_000, id="continued").status == 200
    execute_before = execute_for("continued")
    assert execute_before is not None

    dead = 5_000  # at the deadline the promises are already logically dead

    # task.create must not lease a dead task (pg BUG-2) and must answer the projected pair.
    res = api(
        "task.create",
        now=dead,
        pid="worker-2",
        ttl=60_000,
        action=create_action("created", 5_000, TARGET),
    )
    assert res.status == 200
    assert res.data["task"] == {"id": "created", "state": "fulfilled", "version": 0, "resumes": 0}
    assert res.data["promise"]["state"] == "rejected_timedout"
    assert res.data["promise"]["settledAt"] == 5_000
    assert stored_task("created").state != "acquired"
    assert stored_task("created").version == 0
    assert api("task.acquire", now=dead, id="created", version=0, pid="w", ttl=1).status == 409

    # task.halt on a task that task.get reports fulfilled (pg BUG-4).
    assert api("task.get", now=dead, id="halted").data["task"]["state"] == "fulfilled"
    assert api("task.halt", now=dead, id="halted").status == 409
    assert stored_task("halted").state != "halted"

    # task.continue must not re-dispatch a dead workflow (pg BUG-2b).
    assert api("task.continue", now=dead, id="continued").status == 409
    assert stored_task("continued").state != "pending"
    execute_after = execute_for("continued")
    assert execute_after is not None
    assert execute_after.revision == execute_before.revision
    assert api("task.get", now=dead, id="continued").data["task"]["state"] == "fulfilled"


# --- C5 ---------------------------------------------------------------------------------------


def test_c5_lease_expiry_and_retry_never_revive_a_dead_task(api: Api) -> None:
    # "leased": acquired at 1000 with a 2000 ms lease (expires 3000); its promise dies at 4000.
    start_workflow(api, "leased", timeout_at=4_000, ttl=2_000)
    # "waiting": pending v0, first offered at 1000, next retry due at 6000; dies at 4000.
    api("promise.create", id="waiting", timeoutAt=4_000, tags=TARGET)
    first_offer = execute_for("waiting")
    assert first_offer is not None
    retry_at = stored_task("waiting").retry_at
    assert retry_at == 6_000

    late = 7_000  # past the lease, the retry instant and both deadlines
    # The task steps run first, so the promise timeout step cannot mask them (pg BUG-5, L7).
    lease_expiry(late, BATCH)
    leased = stored_task("leased")
    assert leased.state != "pending"  # not re-pended (it may be left for R1 or fulfilled)
    assert leased.retry_at is None
    assert execute_for("leased") is None

    retry_dispatch(late, BATCH)
    waiting = stored_task("waiting")
    assert waiting.retry_at in (retry_at, None)  # not re-armed at late + 5000
    offer = execute_for("waiting")
    assert offer is not None
    assert offer.revision == first_offer.revision

    run_every_step(late)
    for task_id in ("leased", "waiting"):
        assert stored_task(task_id).state == "fulfilled"
        assert api("task.get", now=late, id=task_id).data["task"]["state"] == "fulfilled"
    assert execute_for("leased") is None
    # Never offered again; the execute left from before is stale once its task is fulfilled,
    # and the outbox cleanup removes it (issue 25) instead of leaving it due forever.
    assert execute_for("waiting") is None


# --- C6 ---------------------------------------------------------------------------------------


def test_c6_resume_skips_an_awaiter_that_is_itself_dead(api: Api) -> None:
    start_workflow(api, "wf", timeout_at=5_000)
    api("promise.create", id="child", timeoutAt=FAR, tags=TARGET)
    assert suspend_on(api, "wf", 1, "child") == 200

    # The child settles after the workflow's own deadline: timeout always wins.
    res = api("promise.settle", now=6_000, id="child", state="resolved", value={})
    assert res.data["promise"]["state"] == "resolved"

    # Not woken: neither re-pended nor offered (it may stay suspended until R1 fulfils it).
    assert stored_task("wf").state in ("suspended", "fulfilled")
    assert stored_task("wf").resumes == []
    assert execute_for("wf") is None
    run_every_step(6_000)
    assert execute_for("wf") is None
    assert api("task.get", now=6_000, id="wf").data["task"] == {
        "id": "wf",
        "state": "fulfilled",
        "version": 1,
        "resumes": 0,
    }
    assert api("task.acquire", now=6_000, id="wf", version=1, pid="w", ttl=1).status == 409


# --- C7 ---------------------------------------------------------------------------------------


def test_c7_heartbeat_does_not_extend_the_lease_of_a_dead_task(api: Api) -> None:
    start_workflow(api, "wf", timeout_at=5_000)  # ttl 60000, leased until 61000
    beat = {"pid": "worker-1", "tasks": [{"id": "wf", "version": 1}]}

    assert api("task.heartbeat", now=2_000, **beat).status == 200
    assert stored_task("wf").expires_at == 62_000  # a live task is extended

    assert api("task.heartbeat", now=6_000, **beat).status == 200
    assert stored_task("wf").expires_at == 62_000  # a dead one is not (resonate's TODO)
    assert api("task.get", now=6_000, id="wf").data["task"]["state"] == "fulfilled"


# --- C8 ---------------------------------------------------------------------------------------


def test_c8_every_response_serves_the_projected_view(api: Api) -> None:
    api("promise.create", id="p", timeoutAt=5_000, tags=TARGET)  # task pending v0, never claimed
    api("promise.create", id="nap", timeoutAt=5_000, tags=TIMER)
    api("promise.create", id="wf", timeoutAt=FAR, tags=TARGET)
    assert api("task.acquire", id="wf", version=0, pid="worker-1", ttl=FAR).status == 200
    at = 5_000

    # Reads: projected, and they write nothing (-p).
    record = api("promise.get", now=at, id="p").data["promise"]
    assert (record["state"], record["settledAt"]) == ("rejected_timedout", 5_000)
    nap = api("promise.get", now=at, id="nap").data["promise"]
    assert (nap["state"], nap["settledAt"]) == ("resolved", 5_000)
    fulfilled = {"id": "p", "state": "fulfilled", "version": 0, "resumes": 0}
    assert api("task.get", now=at, id="p").data["task"] == fulfilled

    def promise_ids(**query: Any) -> list[str]:
        return [r["id"] for r in api("promise.search", now=at, **query).data["promises"]]

    def task_ids(**query: Any) -> list[str]:
        return [r["id"] for r in api("task.search", now=at, **query).data["tasks"]]

    assert promise_ids(state="pending") == ["wf"]
    assert promise_ids(state="rejected_timedout") == ["p"]
    assert promise_ids(state="resolved") == ["nap"]
    assert task_ids(state="fulfilled") == ["p"]
    assert task_ids(state="pending") == []
    assert [r for r in api("promise.search", now=at).data["promises"] if r["id"] == "p"] == [record]
    assert Promise.objects.get(pk="p").state == "pending"
    assert stored_task("p").state == "pending"

    # Every other response names the same record at the same instant.
    assert api("promise.create", now=at, id="p", timeoutAt=5_000, tags=TARGET).data == {
        "promise": record
    }
    settled = api("promise.settle", now=at, id="p", state="resolved", value={})
    assert (settled.status, settled.data) == (200, {"promise": record})
    listened = api("promise.register_listener", now=at, awaited="p", address=LISTENER)
    assert (listened.status, listened.data) == (200, {"promise": record})
    called = api("promise.register_callback", now=at, awaited="p", awaiter="wf")
    assert (called.status, called.data) == (200, {"promise": record})
    fenced = api("task.fence", now=at, id="wf", version=1, action=settle_action("p"))
    assert fenced.status == 200
    assert fenced.data["action"]["head"]["status"] == 200
    assert fenced.data["action"]["data"] == {"promise": record}
    fenced = api("task.fence", now=at, id="wf", version=1, action=create_action("p", 5_000, TARGET))
    assert fenced.data["action"]["data"] == {"promise": record}

    # The task side (pg BUG-2 response half, BUG-4): task.create and task.halt agree with
    # promise.get and task.get at this very instant.
    created = api(
        "task.create", now=at, pid="worker-2", ttl=1_000, action=create_action("p", 5_000, TARGET)
    )
    assert created.status == 200
    assert created.data["promise"] == record
    assert created.data["task"] == fulfilled
    assert api("task.halt", now=at, id="p").status == 409
    assert api("task.continue", now=at, id="p").status == 409
    assert api("task.acquire", now=at, id="p", version=0, pid="worker-2", ttl=1).status == 409

    # Stickiness: once the step materialises the settlement nothing regresses.
    run_every_step(at)
    assert api("promise.get", now=at + 1, id="p").data["promise"] == record
    assert api("task.get", now=at + 1, id="p").data["task"] == fulfilled


# --- C9 ---------------------------------------------------------------------------------------


def test_c9_the_outbox_never_names_a_version_the_task_has_not_reached(api: Api) -> None:
    def version() -> int:
        return stored_task("wf").version

    def offered() -> int | None:
        message = execute_for("wf")
        return None if message is None else message.version

    api("promise.create", id="wf", timeoutAt=FAR, tags=TARGET)
    assert (version(), offered()) == (0, 0)
    assert_outbox_not_ahead()

    api("task.acquire", now=1_000, id="wf", version=0, pid="w1", ttl=60_000)
    assert_outbox_not_ahead()
    api("task.release", now=2_000, id="wf", version=1)
    assert (version(), offered()) == (1, 1)

    api("task.acquire", now=3_000, id="wf", version=1, pid="w1", ttl=60_000)
    fenced = api(
        "task.fence",
        now=3_000,
        id="wf",
        version=2,
        action=create_action("wf.child", FAR, TARGET),
    )
    assert fenced.data["action"]["head"]["status"] == 200
    assert_outbox_not_ahead()
    assert suspend_on(api, "wf", 2, "wf.child", now=3_000) == 200
    api("task.acquire", now=3_000, id="wf.child", version=0, pid="w2", ttl=60_000)
    api(
        "task.fulfill",
        now=4_000,
        id="wf.child",
        version=1,
        action=settle_action("wf.child"),
    )
    assert (version(), offered()) == (2, 2)  # the wake offers the current version, not a new one
    assert_outbox_not_ahead()

    api("task.acquire", now=5_000, id="wf", version=2, pid="w1", ttl=1_000)
    lease_expiry(6_000, BATCH)
    assert (version(), offered()) == (3, 3)
    retry_dispatch(11_000, BATCH)
    assert_outbox_not_ahead()
    api("task.halt", now=12_000, id="wf")
    api("task.continue", now=13_000, id="wf")
    assert (version(), offered()) == (3, 3)
    assert_outbox_not_ahead()
    assert Message.objects.filter(kind="execute", task_id="wf").count() == 1


# --- C10 --------------------------------------------------------------------------------------


def test_c10_at_most_one_worker_holds_a_valid_claim(api: Api) -> None:
    api("promise.create", id="t", timeoutAt=FAR, tags=TARGET)

    first = api("task.acquire", now=1_000, id="t", version=0, pid="a", ttl=1_000)
    second = api("task.acquire", now=1_000, id="t", version=0, pid="b", ttl=1_000)
    assert sorted([first.status, second.status]) == [200, 409]
    assert api("task.acquire", now=1_000, id="t", version=1, pid="b", ttl=1_000).status == 409

    assert lease_expiry(2_000, BATCH) == 1  # "a" stopped heartbeating
    assert api("task.get", now=2_000, id="t").data["task"]["state"] == "pending"
    late = api("task.fulfill", now=2_000, id="t", version=1, action=settle_action("t"))
    assert late.status == 409

    assert api("task.acquire", now=2_000, id="t", version=1, pid="b", ttl=1_000).status == 200
    # The old holder's token is stale for every fenced operation.
    assert api("task.fulfill", now=2_100, id="t", version=1, action=settle_action("t")).status == (
        409
    )
    stale_fence = api(
        "task.fence", now=2_100, id="t", version=1, action=create_action("t.c", FAR, {})
    )
    assert stale_fence.status == 409
    assert not Promise.objects.filter(pk="t.c").exists()
    assert api("task.release", now=2_100, id="t", version=1).status == 409
    api("task.heartbeat", now=2_500, pid="a", tasks=[{"id": "t", "version": 1}])
    assert stored_task("t").expires_at == 3_000

    done = api("task.fulfill", now=2_500, id="t", version=2, action=settle_action("t", "rejected"))
    assert done.status == 200
    assert done.data["promise"]["state"] == "rejected"
    assert api("task.get", now=2_500, id="t").data["task"]["state"] == "fulfilled"


# --- C11 --------------------------------------------------------------------------------------


def test_c11_a_settled_promise_accepts_no_new_callback_or_listener(api: Api) -> None:
    api("promise.create", id="done", timeoutAt=FAR, tags=EXTERNAL)
    api("promise.settle", now=1_000, id="done", state="resolved", value={})
    # "dead": stored pending but past its deadline, so it reads as settled.
    api("promise.create", id="dead", timeoutAt=3_000, tags=EXTERNAL)
    start_workflow(api, "wf")

    for awaited in ("done", "dead"):
        called = api("promise.register_callback", now=4_000, awaited=awaited, awaiter="wf")
        assert called.status == 200
        assert called.data["promise"]["state"] != "pending"
        listened = api("promise.register_listener", now=4_000, awaited=awaited, address=LISTENER)
        assert listened.status == 200
        assert listened.data["promise"]["state"] != "pending"

    assert not Callback.objects.exists()
    assert not Listener.objects.exists()
    # A suspend on them is told to carry on (300) and records nothing either.
    assert suspend_on(api, "wf", 1, "done", "dead", now=4_000) == 300
    assert not Callback.objects.exists()

    # Later, when the steps settle "dead", nobody is unblocked or woken.
    promise_timeouts(4_000, BATCH)
    listener_drain(4_000, BATCH)
    callback_drain(4_000, BATCH)
    run_every_step(4_000)
    assert not Message.objects.filter(kind="unblock").exists()
    assert execute_for("wf") is None
    task = api("task.get", now=4_000, id="wf").data["task"]
    assert (task["state"], task["resumes"]) == ("acquired", 0)
