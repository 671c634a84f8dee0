"""Issue 25 (2, 3): an outbox that stays clean without losing anything owed, and the back-off of
a task nobody can run.

- A stale ``execute`` (its task no longer pending at the message's version) is removed when it
  would be sent and counted; one for a task still pending at that version is always sent.
- A ``poll://uni@`` message whose stream stayed away ``UNDELIVERABLE_AFTER_MS`` leaves the due
  set (kept, listed, re-sendable, purgeable), is not counted as waiting or due, and is delivered
  once its stream connects again; ``any@`` and push messages keep their rules.
- Consecutive ``task.release``s without progress delay the next ``execute`` exponentially;
  progress restarts the count; ``task.acquire`` answers as before; a stream joining the group
  ends the wait, and the execute goes to a stream other than the releaser's.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.test import Client, override_settings
from django.urls import reverse
from prometheus_client import REGISTRY

from outbox import delivery
from outbox.hub import PROCESS, Hub
from outbox.models import PUSH_Q, Message, Subscriber
from outbox.services import purge, resend
from resonate_project.core.errors import Conflict
from resonate_project.engine import outbox as enqueue
from resonate_project.engine import steps
from resonate_project.observability.export import outbox_gauges
from tasks_app.models import Task
from tests.engine.test_delivery_units import connect, web_loop
from tests.support.factories import FAR, Api

ALL = PUSH_Q | ~PUSH_Q
WORKERS = "poll://any@workers"
TTL = 60_000
WINDOW = 60_000
BACKOFF = {"RELEASE_BACKOFF_BASE_MS": 1_000, "RELEASE_BACKOFF_MAX_MS": 4_000}


def ok(res: Any) -> dict[str, Any]:
    assert res.status == 200, res.data
    data: dict[str, Any] = res.data
    return data


def targeted(api: Api, tid: str, now: int = 1_000, target: str = WORKERS) -> None:
    ok(
        api(
            "promise.create",
            now=now,
            id=tid,
            timeoutAt=FAR,
            param={},
            tags={"resonate:target": target},
        )
    )


def acquire(api: Api, tid: str, version: int, now: int, pid: str = "w1") -> dict[str, Any]:
    return ok(api("task.acquire", now=now, id=tid, version=version, pid=pid, ttl=TTL))


def release(api: Api, tid: str, version: int, now: int) -> None:
    ok(api("task.release", now=now, id=tid, version=version))


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def gauges(now: int) -> dict[tuple[str, tuple[str, ...]], float]:
    return {
        (s.name, tuple(s.labels.values())): s.value
        for family in outbox_gauges(now)
        for s in family.samples
    }


def wait_of(version: int, now: int, tid: str = "job") -> int:
    """How long after ``now`` (a release) the execute of ``version`` is written: 0 when the
    release dispatched it itself, else when the retry step does (run at that instant)."""
    if Message.objects.get(kind="execute", task_id=tid).version == version:
        return 0
    due = Task.objects.get(pk=tid).retry_at
    assert due is not None
    assert steps.retry_dispatch(due - 1, 100) == 0  # not before
    assert steps.retry_dispatch(due, 100) == 1
    assert Message.objects.get(kind="execute", task_id=tid).version == version
    return due - now


# --- 3. back-off ------------------------------------------------------------------------------


@override_settings(RESONATE=BACKOFF)
def test_releases_without_progress_delay_the_next_execute_exponentially_up_to_the_cap(api):
    """The first release redispatches at once (the spec's rule: a worker shutting down hands
    its task on); each later one waits 1 s, 2 s, 4 s, 4 s … before its execute is written."""
    targeted(api, "job")
    now, waits = 10_000, []
    for n in range(1, 6):
        acquire(api, "job", n - 1, now)
        release(api, "job", n, now)
        t = Task.objects.get(pk="job")
        assert (t.release_count, t.last_release_at, t.last_pid) == (n, now, "w1")
        waits.append(wait_of(n, now))
        now += 10_000
    assert waits == [0, 1_000, 2_000, 4_000, 4_000]


@override_settings(RESONATE=BACKOFF)
@pytest.mark.parametrize("progress", ["suspend", "continue"])
def test_progress_restarts_the_release_count(api, progress):
    targeted(api, "job")
    ok(
        api(
            "promise.create",
            now=1_000,
            id="dep",
            timeoutAt=FAR,
            param={},
            tags={"resonate:external": "true"},
        )
    )
    for version in (0, 1):
        acquire(api, "job", version, 2_000)
        release(api, "job", version + 1, 2_000)
    assert Task.objects.get(pk="job").release_count == 2
    assert wait_of(2, 2_000) == 1_000
    acquire(api, "job", 2, 10_000)
    if progress == "suspend":
        suspended = api(
            "task.suspend",
            now=10_001,
            id="job",
            version=3,
            actions=[
                {
                    "kind": "promise.register_callback",
                    "head": {},
                    "data": {"awaited": "dep", "awaiter": "job"},
                }
            ],
        )
        assert suspended.status == 200, suspended.data
        ok(api("promise.settle", now=10_002, id="dep", state="resolved", value={}))
        assert Task.objects.get(pk="job").state == "pending"  # resumed
        acquire(api, "job", 3, 10_003)
    else:
        ok(api("task.halt", now=10_001, id="job"))
        ok(api("task.continue", now=10_002, id="job"))
        acquire(api, "job", 3, 10_003)
    assert Task.objects.get(pk="job").release_count == 0
    held = Task.objects.get(pk="job").version
    release(api, "job", held, 20_000)
    assert Task.objects.get(pk="job").release_count == 1
    assert wait_of(held, 20_000) == 0  # the first release again: at once


@override_settings(RESONATE=BACKOFF)
def test_a_heartbeat_is_not_progress(api):
    """The SDKs heartbeat every task they hold on a timer, one they are about to release for
    want of its function included: that does not restart the count."""
    targeted(api, "job")
    for version in (0, 1):
        acquire(api, "job", version, 2_000 + version)
        ok(
            api(
                "task.heartbeat", now=2_010, pid="w1", tasks=[{"id": "job", "version": version + 1}]
            )
        )
        release(api, "job", version + 1, 2_020 + version)
    assert Task.objects.get(pk="job").release_count == 2
    assert wait_of(2, 2_021) == 1_000


@override_settings(RESONATE={"RELEASE_BACKOFF_BASE_MS": 0})
def test_a_back_off_of_0_redispatches_every_release_at_once(api):
    targeted(api, "job")
    for version in range(5):
        acquire(api, "job", version, 2_000 + version)
        release(api, "job", version + 1, 2_000 + version)
        assert wait_of(version + 1, 2_000 + version) == 0
    assert Task.objects.get(pk="job").release_count == 5


@override_settings(RESONATE=BACKOFF)
def test_task_acquire_answers_as_before(api):
    """The new fields are not on the wire: the protocol's task record is unchanged."""
    targeted(api, "job")
    for version in (0, 1, 2):
        claim = acquire(api, "job", version, 2_000)
        release(api, "job", version + 1, 2_000)
    assert set(claim["task"]) == {"id", "state", "version", "resumes", "ttl", "pid"}
    got = ok(api("task.get", now=2_000, id="job"))["task"]
    assert "releases" not in got
    assert "lastPid" not in got


@override_settings(RESONATE={**BACKOFF, "AUTH": "off"})
def test_the_resource_api_shows_the_releases(api, client: Client):
    targeted(api, "job")
    for version in (0, 1):
        acquire(api, "job", version, 2_000 + version)
        release(api, "job", version + 1, 2_000 + version)
    task = client.get("/api/tasks/job").json()
    assert (task["releases"], task["lastReleaseAt"], task["lastPid"]) == (2, 2_001, "w1")
    assert (task["state"], task["version"]) == ("pending", 2)
    listed = client.get("/api/tasks").json()["results"]
    assert [(t["id"], t["releases"]) for t in listed] == [("job", 2)]


@override_settings(RESONATE=BACKOFF)
def test_a_stream_joining_the_group_ends_the_wait_and_gets_the_execute(api):
    """The worker that released the task keeps its stream; a second one joins the group (it may
    have the function): the task is offered at once, and to the newcomer, not the releaser."""
    targeted(api, "job")
    now = 100_000
    clock = [now]
    hub = Hub(clock=lambda: clock[0], autostart=False)
    with web_loop() as loop:
        asyncio.run_coroutine_threadsafe(connect(hub, "workers", "w1"), loop).result(10)
        hub.run_once()
        for version in (0, 1, 2):
            acquire(api, "job", version, now, pid="w1")
            release(api, "job", version + 1, now)
        assert Task.objects.get(pk="job").retry_at == now + 2_000  # the third: backing off 2 s
        Message.objects.all().delete()  # what was sent before
        newcomer = asyncio.run_coroutine_threadsafe(connect(hub, "workers", "w2"), loop).result(10)
        assert newcomer is not None
        clock[0] = now + 10
        hub.run_once()  # registers w2: the task is due now
        assert Task.objects.get(pk="job").retry_at == now + 10
        steps.retry_dispatch(now + 10, 100)
        clock[0] = now + 20
        hub.run_once()  # delivers
        frame = asyncio.run_coroutine_threadsafe(newcomer.queue.get(), loop).result(10)
    assert frame is not None
    assert frame.key == "job"
    assert frame.avoid == "w1"
    assert json.loads(frame.body)["data"]["task"] == {"id": "job", "version": 3}


# --- 1. stale executes ------------------------------------------------------------------------


def test_a_stale_execute_is_removed_when_it_would_be_sent_and_counted(api):
    for tid in ("acquired", "done", "pending"):
        targeted(api, tid)
    acquire(api, "acquired", 0, 2_000)
    acquire(api, "done", 0, 2_000)
    ok(
        api(
            "task.fulfill",
            now=2_001,
            id="done",
            version=1,
            action={
                "kind": "promise.settle",
                "head": {},
                "data": {"id": "done", "state": "resolved", "value": {}},
            },
        )
    )
    # The executes written at birth (version 0) are still in the outbox, never delivered.
    assert set(Message.objects.filter(kind="execute").values_list("key", "version")) == {
        ("acquired", 0),
        ("done", 0),
        ("pending", 0),
    }
    before = counter("resonate_outbox_stale_skipped_total", kind="execute")
    sent = delivery.claim(ALL, 3_000, 100)
    assert [(item.key, json.loads(item.body)["data"]["task"]) for item in sent] == [
        ("pending", {"id": "pending", "version": 0})
    ]
    assert list(Message.objects.values_list("key", flat=True)) == ["pending"]  # leased, kept
    assert counter("resonate_outbox_stale_skipped_total", kind="execute") == before + 2


def test_an_execute_of_a_task_still_pending_at_its_version_is_always_sent(api):
    """Released (back to pending at the same version it was acquired at): the execute the
    release wrote names that version, and is sent, by either claim."""
    targeted(api, "job")
    acquire(api, "job", 0, 2_000)
    release(api, "job", 1, 2_000)
    sent = delivery.claim_routes(["workers"], 3_000, 100, 1_000)
    assert [json.loads(item.body)["data"]["task"]["version"] for item in sent] == [1]


def test_the_cleanup_step_deletes_stale_executes_nobody_would_claim(api):
    """Addressed to a group no worker streams from, a stale execute would stay due forever: the
    step deletes it; the execute of a task still pending at its version stays, however old."""
    for tid in ("acquired", "pending", "settled"):
        targeted(api, tid, target="poll://any@nobody")
    acquire(api, "acquired", 0, 2_000)
    ok(api("promise.settle", now=2_000, id="settled", state="resolved", value={}))
    before = counter("resonate_outbox_stale_skipped_total", kind="execute")
    assert steps.run_due(10**9, 100, [steps.outbox_cleanup]) == 2
    assert list(Message.objects.values_list("key", flat=True)) == ["pending"]
    assert counter("resonate_outbox_stale_skipped_total", kind="execute") == before + 2


def test_a_backlog_of_executes_still_owed_does_not_hide_a_stale_one_from_the_sweep(api):
    """Each run reads a bounded window of due executes and goes on from there next time."""
    for tid in ("a-owed", "b-owed", "c-stale"):
        targeted(api, tid, target="poll://any@nobody")
    acquire(api, "c-stale", 0, 2_000)
    assert enqueue.drop_stale_executes(10**9, 2) == 0  # a-owed, b-owed: both still owed
    assert enqueue.drop_stale_executes(10**9, 2) == 1  # then c-stale
    assert sorted(Message.objects.values_list("key", flat=True)) == ["a-owed", "b-owed"]


# --- 2. undeliverable unicast -----------------------------------------------------------------


def unblock(address: str, pid: str = "p", now: int = 0) -> Message:
    enqueue.unblock({"id": pid, "state": "resolved"}, address, now)
    return Message.objects.get(key=f"{pid}:notify:{address}")


@override_settings(RESONATE={"UNDELIVERABLE_AFTER_MS": WINDOW})
def test_a_unicast_message_nobody_can_receive_leaves_the_due_set_after_the_window(db):
    uni = unblock("poll://uni@default/gone", "p1")
    unblock("poll://any@default", "p2")
    unblock("http://receiver.example/hook", "p3")
    assert steps.outbox_cleanup(WINDOW - 1, 100) == 0  # not yet
    before = gauges(WINDOW + 5_000)
    assert before[("resonate_outbox_messages", ("sse",))] == 2
    assert before[("resonate_outbox_oldest_due_seconds", ("sse",))] == WINDOW / 1000 + 5

    assert steps.run_due(WINDOW, 100, [steps.outbox_cleanup]) == 1
    m = Message.objects.get(key=uni.key)
    assert (m.undeliverable_at, m.dead_at) == (WINDOW, WINDOW)
    assert "no stream" in m.last_error
    # any@ and push are untouched: their rules are unchanged.
    assert Message.objects.filter(dead_at__isnull=True).count() == 2
    after = gauges(WINDOW + 5_000)
    assert after[("resonate_outbox_messages", ("sse",))] == 1
    assert after[("resonate_outbox_undeliverable_messages", ())] == 1
    assert after[("resonate_dead_letters", ())] == 0
    # Never claimed while set aside.
    assert [item.key for item in delivery.claim_routes(["default/gone"], 10**9, 10, 1)] == []


@override_settings(RESONATE={"UNDELIVERABLE_AFTER_MS": WINDOW})
def test_a_stream_connected_anywhere_keeps_its_messages_due(db):
    """The registry of streams is a table: a stream held by another web process counts."""
    unblock("poll://uni@default/alive")
    Subscriber.objects.create(
        group="default", stream_id="alive", process="other:1:x", seen_at=WINDOW * 2 - 1_000
    )
    assert steps.outbox_cleanup(WINDOW * 2, 100) == 0
    # Its process died: the registration goes stale, and then the message is set aside.
    assert steps.outbox_cleanup(WINDOW * 2 + 10_000, 100) == 1


@override_settings(RESONATE={"UNDELIVERABLE_AFTER_MS": 0})
def test_a_window_of_0_keeps_unicast_messages_due_forever(db):
    unblock("poll://uni@default/gone")
    assert steps.outbox_cleanup(10**12, 100) == 0


@override_settings(RESONATE={"UNDELIVERABLE_AFTER_MS": WINDOW})
def test_an_undeliverable_message_is_delivered_when_its_stream_connects_again(db):
    m = unblock("poll://uni@default/w1")
    steps.outbox_cleanup(WINDOW, 100)
    now = WINDOW * 10
    hub = Hub(clock=lambda: now, autostart=False)
    revived = counter("resonate_outbox_undeliverable_total", event="revived")
    with web_loop() as loop:
        stream = asyncio.run_coroutine_threadsafe(connect(hub, "default", "w1"), loop).result(10)
        assert stream is not None
        hub.run_once()
        frame = asyncio.run_coroutine_threadsafe(stream.queue.get(), loop).result(10)
    assert frame is not None
    assert frame.key == m.key
    row = Message.objects.get(key=m.key)
    assert (row.undeliverable_at, row.dead_at, row.next_attempt_at > now) == (None, None, True)
    assert counter("resonate_outbox_undeliverable_total", event="revived") == revived + 1
    assert Subscriber.objects.filter(process=PROCESS, stream_id="w1").exists()


@override_settings(RESONATE={"UNDELIVERABLE_AFTER_MS": WINDOW})
def test_a_newer_message_for_the_same_key_or_a_resend_makes_it_due_again(db):
    m = unblock("poll://uni@default/w1")
    steps.outbox_cleanup(WINDOW, 100)
    resend(key=m.key, now=WINDOW + 1)
    row = Message.objects.get(key=m.key)
    assert (row.undeliverable_at, row.dead_at, row.next_attempt_at) == (None, None, WINDOW + 1)
    steps.outbox_cleanup(WINDOW * 3, 100)
    unblock("poll://uni@default/w1", now=WINDOW * 3 + 1)  # the keyed upsert
    row = Message.objects.get(key=m.key)
    assert (row.undeliverable_at, row.dead_at) == (None, None)


@override_settings(RESONATE={"UNDELIVERABLE_AFTER_MS": WINDOW})
def test_purge_takes_dead_letters_and_undeliverable_messages_only(db):
    gone = unblock("poll://uni@default/gone", "p1")
    live = unblock("poll://any@default", "p2")
    steps.outbox_cleanup(WINDOW, 100)
    with pytest.raises(Conflict):
        purge(key=live.key)
    assert purge(key=gone.key).key == gone.key
    assert list(Message.objects.values_list("key", flat=True)) == [live.key]


@override_settings(RESONATE={"UNDELIVERABLE_AFTER_MS": WINDOW, "AUTH": "off"})
def test_the_resource_api_lists_resends_and_purges_undeliverable_messages(db, client: Client):
    gone = unblock("poll://uni@default/gone", "p1")
    other = unblock("poll://uni@default/gone", "p2")
    live = unblock("poll://any@default", "p3")
    steps.outbox_cleanup(WINDOW, 100)

    def keys(**params: str) -> list[str]:
        res = client.get("/api/outbox", params)
        assert res.status_code == 200, res.content
        return [m["key"] for m in res.json()["results"]]

    assert keys(state="undeliverable") == sorted([gone.key, other.key])
    assert keys(state="live") == [live.key]
    assert keys(state="dead") == []
    listed = client.get("/api/outbox", {"state": "undeliverable"}).json()["results"][0]
    assert listed["undeliverableAt"] == WINDOW
    assert listed["deadAt"] == WINDOW

    res = client.post(f"/api/outbox/{live.key}/purge")
    assert res.status_code == 409
    assert "still being delivered" in res.content.decode()
    res = client.post(f"/api/outbox/{gone.key}/purge")
    assert res.status_code == 200
    assert res.json()["key"] == gone.key
    assert client.post(f"/api/outbox/{gone.key}/purge").status_code == 404
    res = client.post(f"/api/outbox/{other.key}/resend")
    assert res.status_code == 200
    assert "undeliverableAt" not in res.json()
    assert keys(state="undeliverable") == []


@override_settings(RESONATE={"UNDELIVERABLE_AFTER_MS": WINDOW})
def test_the_admin_filters_and_purges_undeliverable_messages(db):
    gone = unblock("poll://uni@default/gone", "p1")
    live = unblock("poll://any@default", "p2")
    steps.outbox_cleanup(WINDOW, 100)
    user = User.objects.create_user("op", password="pw", is_staff=True)
    ct = ContentType.objects.get_for_model(Message)
    user.user_permissions.set(
        Permission.objects.filter(content_type=ct, codename__in=["view_message", "act_on_message"])
    )
    client = Client()
    client.force_login(user)
    url = reverse("admin:outbox_message_changelist")
    page = client.get(url, {"dead": "undeliverable"})
    assert page.status_code == 200
    assert [m.key for m in page.context["cl"].result_list] == [gone.key]
    assert "undeliverable" in page.content.decode()
    detail = client.get(reverse("admin:outbox_message_change", args=[gone.key]))
    assert detail.status_code == 200
    assert "Purge" in detail.content.decode()
    client.post(
        url, {"action": "purge_messages", "_selected_action": [gone.key, live.key]}, follow=True
    )
    # The live one is refused (reported), the undeliverable one is gone.
    assert list(Message.objects.values_list("key", flat=True)) == [live.key]
