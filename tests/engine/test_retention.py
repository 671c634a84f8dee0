"""Retention (engine/retention.py): settled trees older than the window are deleted whole, and a
tree anything still counts on is kept whole. On SQLite and PostgreSQL.

A tree is a root and every promise whose ``resonate:origin`` names it. Times are ms; ``DAY`` is
the window the tests set.
"""

from __future__ import annotations

import io
import json
import threading
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connections
from django.tasks import task_backends

from outbox.models import Message
from promises.models import Callback, Promise
from resonate_project.engine import retention
from resonate_project.engine.retention import Policy, prune, prune_pass
from resonate_project.engine.steps import run_due
from tasks_app.backends import ResonateBackend
from tasks_app.models import Job, Task
from tasks_app.worker import Worker
from tests import tasksapp_fixtures as t
from tests.support.factories import FAR, Api

DAY = 86_400_000
T0 = 1_000
LATER = T0 + 2 * DAY  # two windows after the work settled
POLICY = Policy(promises_ms=DAY)


def ok(res: Any) -> dict[str, Any]:
    assert res.status == 200, res.data
    assert isinstance(res.data, dict)
    return res.data


def member(api: Api, pid: str, root: str, *, target: bool = False, now: int = T0) -> None:
    tags = {"resonate:origin": root, "resonate:scope": "global"}
    if target:
        tags["resonate:target"] = "poll://any@workers"
    res = api("promise.create", now=now, id=pid, timeoutAt=FAR, param={}, tags=tags)
    assert res.status in (200, 201), res.data


def settle(api: Api, pid: str, now: int = T0) -> None:
    ok(api("promise.settle", now=now, id=pid, state="resolved", value={"data": "ok"}))


def settled_tree(api: Api, root: str, children: int = 2, now: int = T0) -> list[str]:
    """A root with a task, fulfilled, and ``children`` settled children of its origin."""
    member(api, root, root, target=True, now=now)
    ids = [root] + [f"{root}:{i}" for i in range(1, children + 1)]
    for child in ids[1:]:
        member(api, child, root, now=now)
        settle(api, child, now)
    ok(api("task.acquire", now=now, id=root, version=0, pid="w1", ttl=60_000))
    action = {
        "kind": "promise.settle",
        "head": {},
        "data": {"id": root, "state": "resolved", "value": {}},
    }
    ok(api("task.fulfill", now=now, id=root, version=1, action=action))
    return ids


def present(ids: list[str]) -> set[str]:
    return set(Promise.objects.filter(id__in=ids).values_list("id", flat=True))


def test_a_settled_tree_past_the_window_is_deleted_whole(api: Api) -> None:
    ids = settled_tree(api, "old")
    keep = settled_tree(api, "young", now=LATER - DAY // 2)
    assert Task.objects.filter(promise_id="old").exists()

    done = prune(LATER, POLICY, batch=100)

    assert (done.trees, done.promises, done.tasks) == (1, 3, 1)
    assert present(ids) == set()
    assert not Task.objects.filter(promise_id="old").exists()
    assert present(keep) == set(keep)  # settled within the window: kept
    assert api("promise.get", now=LATER, id="old").status == 404
    # The id is free again: promise.create makes a new promise (the documented deviation).
    member(api, "old", "old", now=LATER)
    assert ok(api("promise.get", now=LATER, id="old"))["promise"]["state"] == "pending"


def test_a_dry_run_counts_and_deletes_nothing(api: Api) -> None:
    ids = settled_tree(api, "old")
    done = prune(LATER, POLICY, batch=100, dry_run=True)
    assert (done.trees, done.promises, done.tasks) == (1, 3, 1)
    assert present(ids) == set(ids)


def test_no_window_keeps_everything(api: Api) -> None:
    ids = settled_tree(api, "old")
    assert prune(LATER * 1000, Policy(), batch=100).trees == 0
    assert present(ids) == set(ids)


def test_a_tree_with_a_pending_promise_is_kept_whole(api: Api) -> None:
    ids = settled_tree(api, "run")
    member(api, "run:9", "run")  # still pending: the run is not over
    done = prune(LATER, POLICY, batch=100)
    assert done.trees == 0
    assert done.kept >= 1
    assert present([*ids, "run:9"]) == {*ids, "run:9"}
    settle(api, "run:9", T0 + 1)
    assert prune(LATER, POLICY, batch=100).promises == 4
    assert present([*ids, "run:9"]) == set()


def test_a_member_settled_inside_the_window_keeps_the_tree(api: Api) -> None:
    ids = settled_tree(api, "run")
    member(api, "run:late", "run")
    settle(api, "run:late", LATER - 1)
    assert prune(LATER, POLICY, batch=100).trees == 0
    assert present(ids) == set(ids)


def test_an_undelivered_unblock_keeps_the_tree(api: Api) -> None:
    member(api, "heard", "heard")
    ok(api("promise.register_listener", now=T0, awaited="heard", address="poll://uni@g/late"))
    settle(api, "heard")
    run_due(T0, 100)
    assert Message.objects.filter(key__startswith="heard:notify:").exists()
    assert prune(LATER, POLICY, batch=100).trees == 0
    assert present(["heard"]) == {"heard"}
    Message.objects.filter(key__startswith="heard:notify:").delete()  # delivered
    assert prune(LATER, POLICY, batch=100).trees == 1
    assert present(["heard"]) == set()


def test_a_callback_from_another_tree_keeps_the_tree(api: Api) -> None:
    ids = settled_tree(api, "awaited")
    member(api, "waiter", "waiter", target=True)
    Callback.objects.create(awaited_id="awaited:1", awaiter_id="waiter", ready=True)
    assert prune(LATER, POLICY, batch=100).trees == 0
    assert present(ids) == set(ids)


def test_a_schedules_last_occurrence_is_kept_and_earlier_ones_go(api: Api) -> None:
    ok(
        api(
            "schedule.create",
            now=T0,
            id="nightly",
            cron="0 * * * *",
            promiseId="nightly.{{.timestamp}}",
            promiseTimeout=60_000,
            promiseParam={},
            promiseTags={},
        )
    )
    run_due(3 * 3_600_000 + 5, 100)  # fires 01:00, 02:00 and 03:00
    found = ok(api("promise.search", now=3 * 3_600_000 + 5, tags={"resonate:schedule": "nightly"}))
    fired = sorted(p["id"] for p in found["promises"])
    assert len(fired) == 3, fired
    for pid in fired:
        settle(api, pid, 3 * 3_600_000 + 10)
    prune(3 * 3_600_000 + 10 + 2 * DAY, POLICY, batch=100)
    assert present(fired) == {"nightly.10800000"}


def test_a_blocked_tree_does_not_hold_up_the_ones_after_it(api: Api) -> None:
    blocked = settled_tree(api, "a-blocked", now=T0)
    member(api, "a-blocked:9", "a-blocked")  # pending
    later = [settled_tree(api, f"b{i}", children=0, now=T0 + 1 + i) for i in range(3)]
    cursor = None
    for _ in range(10):  # one candidate per pass
        cursor = prune_pass(LATER, POLICY, batch=1, cursor=cursor).cursor
        if cursor is None:
            break
    assert present([pid for tree in later for pid in tree]) == set()
    assert present(blocked) == set(blocked)


def test_django_task_trees_follow_their_own_window(api: Api, settings: Any) -> None:
    settings.TASKS = {
        "default": {
            "BACKEND": "tasks_app.backends.ResonateBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"RETRY_BACKOFF_MS": 0},
        }
    }
    backend = task_backends["default"]
    assert isinstance(backend, ResonateBackend)
    result = t.add.enqueue(2, 3)
    assert Worker(backend, ["default"], out=lambda line: None).work_once() == 1
    job = Job.objects.get()
    done_at = Promise.objects.get(id=job.pk).settled_at
    assert done_at is not None
    plain = settled_tree(api, "plain", now=done_at)
    policy = Policy(promises_ms=DAY, django_tasks_ms=10 * DAY)

    assert prune(done_at + 2 * DAY, policy, batch=100).django_tasks == 0
    assert present([job.pk]) == {job.pk}  # a result is kept its own window
    assert present(plain) == set()
    assert prune(done_at + 11 * DAY, policy, batch=100).django_tasks == 1
    assert present([job.pk]) == set()
    assert not Job.objects.exists()
    assert result.id


def test_dead_letters_past_their_window_are_deleted(api: Api) -> None:
    common = {"kind": "unblock", "address": "https://example.test/x", "created_at": T0}
    Message.objects.create(key="old-dead", dead_at=T0, **common)
    Message.objects.create(key="new-dead", dead_at=LATER, **common)
    Message.objects.create(key="due", **common)
    done = prune_pass(LATER + 1, Policy(dead_letters_ms=DAY), batch=100)
    assert done.dead_letters == 1
    assert set(Message.objects.values_list("key", flat=True)) == {"new-dead", "due"}


def test_the_runner_prunes_once_per_interval(api: Api, settings: Any) -> None:
    settings.RESONATE = {"RETENTION_MS": DAY, "RETENTION_INTERVAL_MS": 60_000}
    retention._Progress.last_at = None
    retention._Progress.cursor = None
    retention._Progress.expired_at = None
    settled_tree(api, "first")
    assert retention.tick(LATER) is not None
    assert present(["first"]) == set()
    settled_tree(api, "second")
    assert retention.tick(LATER + 1_000) is None  # within the interval
    assert present(["second"]) == {"second"}
    done = retention.tick(LATER + 61_000)
    assert done is not None
    assert done.trees == 1


@pytest.mark.postgres  # SQLite serialises writers: no pass can meet a lock a request holds
@pytest.mark.django_db(transaction=True)
def test_a_tree_a_request_has_locked_is_left_for_a_later_pass(api: Api) -> None:
    ids = settled_tree(api, "busy")
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        from django.db import transaction

        try:
            with transaction.atomic():
                Promise.objects.select_for_update().filter(id="busy:1").get()
                locked.set()
                release.wait(10)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        done = prune(LATER, POLICY, batch=100)
        assert done.trees == 0
        assert present(ids) == set(ids)  # kept whole: not the unlocked part of it
    finally:
        release.set()
        holder.join()
    assert prune(LATER, POLICY, batch=100).trees == 1


def resonate(*args: str) -> str:
    out = io.StringIO()
    call_command("resonate", *args, stdout=out)
    return out.getvalue()


def test_the_prune_command_dry_runs_then_deletes(api: Api) -> None:
    ids = settled_tree(api, "old")  # settled at 1970-01-01, long before --older-than 1d ago
    said = resonate("prune", "--older-than", "1d", "--dry-run")
    assert "would delete 1 trees (3 promises, 1 tasks" in said
    assert present(ids) == set(ids)
    counts = json.loads(resonate("prune", "--older-than", "1d", "--json"))
    assert counts["trees"] == 1
    assert counts["promises"] == 3
    assert counts["dry_run"] is False
    assert present(ids) == set()


def test_the_prune_command_without_a_window_refuses_and_deletes_nothing(api: Api) -> None:
    ids = settled_tree(api, "old")
    with pytest.raises(CommandError, match="no retention window"):
        resonate("prune")
    assert present(ids) == set(ids)


def test_a_promise_whose_id_another_tree_names_as_origin_stays_in_its_own_tree(api: Api) -> None:
    """``b`` belongs to tree ``a`` (its origin) while ``b:1`` names ``b`` as its origin: pruning
    tree ``b`` (just ``b:1``) never takes ``b`` out of tree ``a``, whose other member is pending."""
    member(api, "a", "a")
    member(api, "b", "a")
    member(api, "b:1", "b")
    settle(api, "b")
    settle(api, "b:1")
    prune(LATER, POLICY, batch=100)
    assert present(["a", "b", "b:1"]) == {"a", "b"}


def test_the_overview_shows_the_policy_how_far_behind_and_the_totals(
    api: Api, admin_client: Any, settings: Any
) -> None:
    page = admin_client.get("/admin/overview/").content.decode()
    assert "off: nothing is deleted" in page
    ids = settled_tree(api, "old")
    settings.RESONATE = {"RETENTION_MS": DAY}
    page = admin_client.get("/admin/overview/").content.decode()
    assert "keeps settled trees" in page
    assert "(behind)" in page  # settled in 1970, kept a day
    prune(LATER, POLICY, batch=100)
    prune(LATER, POLICY, batch=100, dry_run=True)  # a dry run adds nothing
    assert present(ids) == set()
    page = admin_client.get("/admin/overview/").content.decode()
    assert '<td class="n total-trees">1</td>' in page
    assert '<td class="n total-promises">3</td>' in page
    assert '<td class="n total-tasks">1</td>' in page
    assert "(behind)" not in page


def test_the_prune_command_paces_itself_and_refuses_a_negative_pace(api: Api) -> None:
    ids = settled_tree(api, "old")
    with pytest.raises(CommandError, match="--pace must be 0 or more"):
        resonate("prune", "--older-than", "1d", "--pace", "-1")
    assert present(ids) == set(ids)
    assert "deleted 1 trees" in resonate("prune", "--older-than", "1d", "--pace", "0")
