"""The API through the real HTTP path: Django's test client POSTing envelopes to ``/``.

Covers the envelope (wire-and-sdks §2.4: kind and corrId echoed, head.status equals the HTTP
status, error data a JSON string), the record shapes the SDKs enforce (§5.3), a success case for
each of the 21 kinds, the malformed-input 400s (nothing written, the message names the problem),
the auxiliary routes, and a fuzzer asserting no client input ever gets a 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import functools
import json
import time
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import Client, override_settings
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.core.conf import resonate_settings
from resonate_project.edges.api import HandlerThreads, web_threads
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import FAR

VERSION = "2026-04-01"
TARGET = "resonate:target"
LEGACY_MESSAGE = "This endpoint is no longer supported. Please update to the latest SDK."


# --- helpers ------------------------------------------------------------------------------------


def post_raw(client: Client, body: bytes | str) -> tuple[int, dict[str, Any]]:
    resp = client.post("/", data=body, content_type="application/json")
    assert resp["Content-Type"].startswith("application/json"), resp["Content-Type"]
    env = json.loads(resp.content)
    assert isinstance(env, dict), env
    assert set(env) == {"kind", "head", "data"}, env
    assert env["head"]["status"] == resp.status_code, (resp.status_code, env)
    assert isinstance(env["head"]["version"], str)
    if resp.status_code >= 400:
        assert isinstance(env["data"], str), env
    return resp.status_code, env


def post(
    client: Client,
    kind: str,
    data: Any,
    corr: str = "corr-1",
    head: dict[str, Any] | None = None,
) -> tuple[int, Any]:
    """POST one envelope; check the reply envelope; return (status, data)."""
    request_head = {"corrId": corr, "version": VERSION, **(head or {})}
    body = json.dumps({"kind": kind, "head": request_head, "data": data})
    status, env = post_raw(client, body)
    assert env["kind"] == kind
    assert env["head"] == {"corrId": corr, "status": status, "version": VERSION}, env
    if status < 400:
        assert isinstance(env["data"], dict), env
    return status, env["data"]


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def assert_value_shape(v: Any) -> None:
    assert isinstance(v, dict), v
    assert set(v) <= {"headers", "data"}, v
    if "data" in v:
        assert isinstance(v["data"], str), v
    if "headers" in v:
        assert isinstance(v["headers"], dict), v
        assert all(isinstance(k, str) and isinstance(x, str) for k, x in v["headers"].items())


def assert_promise_shape(rec: Any) -> None:
    """§5.3: param/value always objects; tags an object; numbers; settledAt absent while
    pending, a number once settled."""
    required = {"id", "state", "param", "value", "tags", "timeoutAt", "createdAt"}
    assert isinstance(rec, dict), rec
    assert required <= set(rec) <= required | {"settledAt"}, rec
    assert rec["state"] in (
        "pending",
        "resolved",
        "rejected",
        "rejected_canceled",
        "rejected_timedout",
    )
    assert_value_shape(rec["param"])
    assert_value_shape(rec["value"])
    assert isinstance(rec["tags"], dict)
    assert all(isinstance(k, str) and isinstance(x, str) for k, x in rec["tags"].items())
    assert is_int(rec["timeoutAt"]), rec
    assert is_int(rec["createdAt"]), rec
    if rec["state"] == "pending":
        assert "settledAt" not in rec, rec
    else:
        assert is_int(rec["settledAt"]), rec


def assert_task_shape(rec: Any) -> None:
    """§5.3: resumes a number; ttl and pid present exactly while acquired."""
    required = {"id", "state", "version", "resumes"}
    assert isinstance(rec, dict), rec
    assert required <= set(rec) <= required | {"ttl", "pid"}, rec
    assert rec["state"] in ("pending", "acquired", "suspended", "halted", "fulfilled")
    assert is_int(rec["version"]), rec
    assert is_int(rec["resumes"]), rec
    if rec["state"] == "acquired":
        assert is_int(rec["ttl"]), rec
        assert isinstance(rec["pid"], str), rec
    else:
        assert "ttl" not in rec, rec
        assert "pid" not in rec, rec


def assert_schedule_shape(rec: Any) -> None:
    required = {
        "id",
        "cron",
        "promiseId",
        "promiseTimeout",
        "promiseParam",
        "promiseTags",
        "createdAt",
        "nextRunAt",
    }
    assert isinstance(rec, dict), rec
    assert required <= set(rec) <= required | {"lastRunAt"}, rec
    assert_value_shape(rec["promiseParam"])
    assert isinstance(rec["promiseTags"], dict)
    assert is_int(rec["createdAt"])
    assert is_int(rec["nextRunAt"])
    assert is_int(rec["promiseTimeout"])
    assert rec["nextRunAt"] > rec["createdAt"], rec


def create_promise(client: Client, pid: str, tags: dict[str, str] | None = None) -> dict[str, Any]:
    status, data = post(client, "promise.create", {"id": pid, "timeoutAt": FAR, "tags": tags or {}})
    assert status == 200
    assert_promise_shape(data["promise"])
    return dict(data["promise"])


def create_task(client: Client, tid: str, branch: str | None = None) -> dict[str, Any]:
    """A task acquired by pid "w1" at version 1 (task.create)."""
    tags = {TARGET: "poll://any@g"}
    if branch is not None:
        tags["resonate:branch"] = branch
    action = {
        "kind": "promise.create",
        "head": {},
        "data": {"id": tid, "timeoutAt": FAR, "tags": tags},
    }
    status, data = post(client, "task.create", {"pid": "w1", "ttl": 60_000, "action": action})
    assert status == 200
    assert data["task"]["state"] == "acquired"
    return dict(data["task"])


def stored() -> tuple[list[Any], ...]:
    """Everything the server stores, to show a refused request wrote nothing."""
    return (
        list(Promise.objects.order_by("id").values()),
        list(Task.objects.order_by("promise_id").values()),
        list(Callback.objects.order_by("id").values()),
        list(Listener.objects.order_by("id").values()),
        list(Schedule.objects.order_by("id").values()),
        list(Message.objects.order_by("key").values()),
    )


# --- one success case per kind (21) ----------------------------------------------------------


def test_promise_create_answers_the_pending_record(client: Client, db: Any) -> None:
    param = {"headers": {"h": "1"}, "data": "cGFyYW0="}
    status, data = post(
        client,
        "promise.create",
        {"id": "p1", "timeoutAt": FAR, "param": param, "tags": {"k": "v"}},
        corr="create-1",
    )
    assert status == 200
    rec = data["promise"]
    assert_promise_shape(rec)
    assert (rec["id"], rec["state"], rec["param"], rec["value"], rec["tags"]) == (
        "p1",
        "pending",
        param,
        {},
        {"k": "v"},
    )
    assert rec["timeoutAt"] == FAR


def test_promise_get_answers_the_stored_record(client: Client, db: Any) -> None:
    created = create_promise(client, "p1", {"k": "v"})
    status, data = post(client, "promise.get", {"id": "p1"}, corr="get-7")
    assert status == 200
    assert data == {"promise": created}
    assert_promise_shape(data["promise"])


def test_promise_settle_answers_the_settled_record(client: Client, db: Any) -> None:
    create_promise(client, "p1")
    status, data = post(
        client, "promise.settle", {"id": "p1", "state": "rejected", "value": {"data": "eA=="}}
    )
    assert status == 200
    rec = data["promise"]
    assert_promise_shape(rec)
    assert (rec["state"], rec["value"]) == ("rejected", {"data": "eA=="})
    assert rec["createdAt"] <= rec["settledAt"] < rec["timeoutAt"]


def test_promise_register_callback_answers_the_awaited_record(client: Client, db: Any) -> None:
    awaited = create_promise(client, "ext", {"resonate:external": "true"})
    create_task(client, "wf")
    status, data = post(client, "promise.register_callback", {"awaited": "ext", "awaiter": "wf"})
    assert status == 200
    assert data == {"promise": awaited}
    assert Callback.objects.filter(awaited_id="ext", awaiter_id="wf").exists()


def test_promise_register_listener_answers_the_record(client: Client, db: Any) -> None:
    awaited = create_promise(client, "ext", {"resonate:external": "true"})
    status, data = post(
        client, "promise.register_listener", {"awaited": "ext", "address": "poll://uni@g/1"}
    )
    assert status == 200
    assert data == {"promise": awaited}


def test_promise_search_pages_with_a_cursor_absent_on_the_last_page(
    client: Client, db: Any
) -> None:
    for pid in ("s1", "s2", "s3"):
        create_promise(client, pid, {"suite": "api"})
    create_promise(client, "other", {"suite": "else"})
    status, first = post(client, "promise.search", {"tags": {"suite": "api"}, "limit": 2})
    assert status == 200
    assert [r["id"] for r in first["promises"]] == ["s1", "s2"]
    assert first["cursor"] == "s2"
    for rec in first["promises"]:
        assert_promise_shape(rec)
    status, last = post(
        client,
        "promise.search",
        {"tags": {"suite": "api"}, "limit": 2, "cursor": first["cursor"]},
    )
    assert status == 200
    assert [r["id"] for r in last["promises"]] == ["s3"]
    assert "cursor" not in last


def test_task_get_answers_a_pending_task_without_lease_fields(client: Client, db: Any) -> None:
    create_promise(client, "t1", {TARGET: "poll://any@g"})
    status, data = post(client, "task.get", {"id": "t1"})
    assert status == 200
    assert data == {"task": {"id": "t1", "state": "pending", "version": 0, "resumes": 0}}


def test_task_create_answers_task_promise_and_preload(client: Client, db: Any) -> None:
    action = {
        "kind": "promise.create",
        "head": {"corrId": "inner"},
        "data": {"id": "wf", "timeoutAt": FAR, "tags": {TARGET: "poll://any@g"}},
    }
    status, data = post(client, "task.create", {"pid": "w1", "ttl": 30_000, "action": action})
    assert status == 200
    assert set(data) == {"task", "promise", "preload"}
    assert data["task"] == {
        "id": "wf",
        "state": "acquired",
        "version": 1,
        "resumes": 0,
        "ttl": 30_000,
        "pid": "w1",
    }
    assert_promise_shape(data["promise"])
    assert data["promise"]["state"] == "pending"
    assert data["preload"] == []


def test_task_acquire_bumps_the_version_and_answers_the_preload(client: Client, db: Any) -> None:
    create_promise(client, "wf", {TARGET: "poll://any@g", "resonate:branch": "wf"})
    sibling = create_promise(client, "wf.1", {"resonate:branch": "wf"})
    status, data = post(client, "task.acquire", {"id": "wf", "version": 0, "pid": "w2", "ttl": 5})
    assert status == 200
    assert data["task"] == {
        "id": "wf",
        "state": "acquired",
        "version": 1,
        "resumes": 0,
        "ttl": 5,
        "pid": "w2",
    }
    assert_promise_shape(data["promise"])
    assert data["preload"] == [sibling]


def test_task_fence_wraps_the_inner_envelope(client: Client, db: Any) -> None:
    create_task(client, "wf", branch="wf")
    action = {
        "kind": "promise.create",
        "head": {"corrId": "inner-9", "version": VERSION},
        "data": {"id": "wf.1", "timeoutAt": FAR, "tags": {"resonate:branch": "wf"}},
    }
    status, data = post(client, "task.fence", {"id": "wf", "version": 1, "action": action})
    assert status == 200
    assert set(data) == {"action", "preload"}
    inner = data["action"]
    assert inner["kind"] == "promise.create"
    assert inner["head"] == {"corrId": "inner-9", "status": 200, "version": VERSION}
    assert_promise_shape(inner["data"]["promise"])
    assert inner["data"]["promise"]["id"] == "wf.1"
    assert data["preload"] == [inner["data"]["promise"]]


def test_task_heartbeat_answers_an_empty_object(client: Client, db: Any) -> None:
    create_task(client, "wf")
    status, data = post(
        client, "task.heartbeat", {"pid": "w1", "tasks": [{"id": "wf", "version": 1}]}
    )
    assert (status, data) == (200, {})


def test_task_suspend_answers_200_when_it_parks(client: Client, db: Any) -> None:
    create_task(client, "wf")
    create_promise(client, "ext", {"resonate:external": "true"})
    actions = [
        {
            "kind": "promise.register_callback",
            "head": {},
            "data": {"awaited": "ext", "awaiter": "wf"},
        }
    ]
    status, data = post(client, "task.suspend", {"id": "wf", "version": 1, "actions": actions})
    assert (status, data) == (200, {})
    _, task = post(client, "task.get", {"id": "wf"})
    assert task["task"] == {"id": "wf", "state": "suspended", "version": 1, "resumes": 0}


def test_task_suspend_answers_http_300_when_an_awaited_promise_is_settled(
    client: Client, db: Any
) -> None:
    create_task(client, "wf")
    create_promise(client, "ext", {"resonate:external": "true"})
    _, settled = post(client, "promise.settle", {"id": "ext", "state": "resolved"})
    actions = [
        {
            "kind": "promise.register_callback",
            "head": {},
            "data": {"awaited": "ext", "awaiter": "wf"},
        }
    ]
    status, data = post(client, "task.suspend", {"id": "wf", "version": 1, "actions": actions})
    assert status == 300
    assert set(data) == {"preload"}
    assert settled["promise"] in data["preload"]
    for rec in data["preload"]:
        assert_promise_shape(rec)


def test_task_fulfill_answers_the_settled_promise(client: Client, db: Any) -> None:
    create_task(client, "wf")
    action = {
        "kind": "promise.settle",
        "head": {},
        "data": {"id": "wf", "state": "resolved", "value": {"data": "ZG9uZQ=="}},
    }
    status, data = post(client, "task.fulfill", {"id": "wf", "version": 1, "action": action})
    assert status == 200
    assert_promise_shape(data["promise"])
    assert (data["promise"]["state"], data["promise"]["value"]) == (
        "resolved",
        {"data": "ZG9uZQ=="},
    )
    _, task = post(client, "task.get", {"id": "wf"})
    assert task["task"] == {"id": "wf", "state": "fulfilled", "version": 1, "resumes": 0}


def test_task_release_answers_an_empty_object(client: Client, db: Any) -> None:
    create_task(client, "wf")
    status, data = post(client, "task.release", {"id": "wf", "version": 1})
    assert (status, data) == (200, {})
    _, task = post(client, "task.get", {"id": "wf"})
    assert task["task"] == {"id": "wf", "state": "pending", "version": 1, "resumes": 0}


def test_task_halt_answers_an_empty_object(client: Client, db: Any) -> None:
    create_task(client, "wf")
    status, data = post(client, "task.halt", {"id": "wf"})
    assert (status, data) == (200, {})
    _, task = post(client, "task.get", {"id": "wf"})
    assert task["task"]["state"] == "halted"
    assert_task_shape(task["task"])


def test_task_continue_answers_an_empty_object(client: Client, db: Any) -> None:
    create_task(client, "wf")
    post(client, "task.halt", {"id": "wf"})
    status, data = post(client, "task.continue", {"id": "wf"})
    assert (status, data) == (200, {})
    _, task = post(client, "task.get", {"id": "wf"})
    assert task["task"] == {"id": "wf", "state": "pending", "version": 1, "resumes": 0}


def test_task_search_answers_tasks_without_a_cursor_on_the_last_page(
    client: Client, db: Any
) -> None:
    create_task(client, "wf")
    create_promise(client, "t2", {TARGET: "poll://any@g"})
    status, data = post(client, "task.search", {"state": "acquired"})
    assert status == 200
    assert data == {
        "tasks": [
            {
                "id": "wf",
                "state": "acquired",
                "version": 1,
                "resumes": 0,
                "ttl": 60_000,
                "pid": "w1",
            }
        ]
    }
    status, data = post(client, "task.search", {"limit": 1})
    assert status == 200
    assert [t["id"] for t in data["tasks"]] == ["t2"]
    assert data["cursor"] == "t2"
    status, data = post(client, "task.search", {"limit": 1, "cursor": "t2"})
    assert [t["id"] for t in data["tasks"]] == ["wf"]
    assert "cursor" not in data
    for rec in data["tasks"]:
        assert_task_shape(rec)


SCHEDULE = {
    "id": "nightly",
    "cron": "0 3 * * *",
    "promiseId": "{{.id}}.{{.timestamp}}",
    "promiseTimeout": 60_000,
    "promiseParam": {"data": "eA=="},
    "promiseTags": {TARGET: "poll://any@g"},
}


def test_schedule_create_answers_the_schedule_record(client: Client, db: Any) -> None:
    status, data = post(client, "schedule.create", SCHEDULE)
    assert status == 200
    rec = data["schedule"]
    assert_schedule_shape(rec)
    assert "lastRunAt" not in rec
    assert {k: rec[k] for k in SCHEDULE} == SCHEDULE


def test_schedule_get_answers_the_stored_record(client: Client, db: Any) -> None:
    _, created = post(client, "schedule.create", SCHEDULE)
    status, data = post(client, "schedule.get", {"id": "nightly"})
    assert (status, data) == (200, created)


def test_schedule_delete_answers_an_empty_object(client: Client, db: Any) -> None:
    post(client, "schedule.create", SCHEDULE)
    status, data = post(client, "schedule.delete", {"id": "nightly"})
    assert (status, data) == (200, {})
    status, _ = post(client, "schedule.get", {"id": "nightly"})
    assert status == 404


def test_schedule_search_answers_schedules_without_a_cursor(client: Client, db: Any) -> None:
    _, created = post(client, "schedule.create", SCHEDULE)
    status, data = post(client, "schedule.search", {"tags": {TARGET: "poll://any@g"}})
    assert (status, data) == (200, {"schedules": [created["schedule"]]})


def test_errors_are_json_strings_with_the_http_status_in_the_head(client: Client, db: Any) -> None:
    for kind, data, expected in [
        ("promise.get", {"id": "nope"}, 404),
        ("task.get", {"id": "nope"}, 404),
        ("schedule.get", {"id": "nope"}, 404),
        ("task.acquire", {"id": "nope", "version": 0, "pid": "w", "ttl": 1}, 404),
        ("debug.snap", {}, 403),
    ]:
        status, message = post(client, kind, data, corr=f"err-{kind}")
        assert status == expected, (kind, message)
        assert isinstance(message, str)
        assert message


def test_conflicts_and_unprocessable_are_json_strings(client: Client, db: Any) -> None:
    create_task(client, "wf")
    create_promise(client, "internal")
    status, message = post(client, "task.acquire", {"id": "wf", "version": 1, "pid": "w", "ttl": 1})
    assert status == 409
    assert isinstance(message, str)
    status, message = post(
        client, "promise.register_listener", {"awaited": "internal", "address": "http://h/x"}
    )
    assert status == 422
    assert isinstance(message, str)


# --- bad input: 400, nothing written, the message names what is wrong -----------------------


def envelope(kind: str, data: Any, head: dict[str, Any] | None = None) -> str:
    return json.dumps({"kind": kind, "head": head or {"corrId": "c"}, "data": data})


CREATE = {"id": "fresh", "timeoutAt": FAR, "tags": {TARGET: "poll://any@g"}}
ACQUIRE = {"id": "wf", "version": 1, "pid": "w", "ttl": 1000}

BAD_INPUT: list[tuple[str, str, str]] = [
    ("unparseable JSON", '{"kind": "promise.create", "data": {', "json"),
    ("a JSON array body", json.dumps([{"kind": "promise.create", "data": CREATE}]), "object"),
    ("a JSON string body", json.dumps("promise.create"), "object"),
    ("missing kind", json.dumps({"head": {}, "data": CREATE}), "kind"),
    ("kind not a string", json.dumps({"kind": 7, "data": CREATE}), "kind"),
    ("unknown kind", envelope("promise.explode", CREATE), "promise.explode"),
    ("data not an object", envelope("promise.create", [CREATE]), "data"),
    ("data a string", envelope("promise.create", "fresh"), "data"),
    (
        "head not an object",
        json.dumps({"kind": "promise.create", "head": [], "data": CREATE}),
        "head",
    ),
    (
        "timeoutAt a string",
        envelope("promise.create", {**CREATE, "timeoutAt": "soon"}),
        "timeoutAt",
    ),
    ("timeoutAt a float", envelope("promise.create", {**CREATE, "timeoutAt": 1.5}), "timeoutAt"),
    ("id a number", envelope("promise.create", {**CREATE, "id": 5}), "id"),
    ("tags values not strings", envelope("promise.create", {**CREATE, "tags": {"a": 1}}), "tags"),
    ("param not an object", envelope("promise.create", {**CREATE, "param": "x"}), "param"),
    ("missing timeoutAt", envelope("promise.create", {"id": "fresh"}), "timeoutAt"),
    ("missing id", envelope("promise.create", {"timeoutAt": FAR}), "id"),
    ("missing pid", envelope("task.acquire", {"id": "wf", "version": 1, "ttl": 5}), "pid"),
    ("missing action", envelope("task.create", {"pid": "w", "ttl": 5}), "action"),
    ("negative timeoutAt", envelope("promise.create", {**CREATE, "timeoutAt": -1}), "timeoutAt"),
    ("negative ttl", envelope("task.acquire", {**ACQUIRE, "ttl": -5}), "ttl"),
    ("negative version", envelope("task.acquire", {**ACQUIRE, "version": -1}), "version"),
    ("id of 5000 chars", envelope("promise.create", {**CREATE, "id": "x" * 5000}), "id"),
    ("empty id", envelope("promise.create", {**CREATE, "id": ""}), "id"),
    (
        "unsupported protocol version",
        envelope("promise.create", CREATE, {"corrId": "c", "version": "1999-01-01"}),
        "version",
    ),
    (
        "corrId not a string",
        envelope("promise.create", CREATE, {"corrId": 42, "version": VERSION}),
        "corrId",
    ),
    (
        "unsettable state",
        envelope("promise.settle", {"id": "ext", "state": "rejected_timedout"}),
        "state",
    ),
    ("unknown settle state", envelope("promise.settle", {"id": "ext", "state": "done"}), "state"),
    (
        "callback on itself",
        envelope("promise.register_callback", {"awaited": "wf", "awaiter": "wf"}),
        "await",
    ),
    (
        "undeliverable listener address",
        envelope("promise.register_listener", {"awaited": "ext", "address": "poll://g"}),
        "address",
    ),
    (
        "task.create without a target",
        envelope(
            "task.create",
            {
                "pid": "w",
                "ttl": 5,
                "action": {"kind": "promise.create", "data": {"id": "n", "timeoutAt": FAR}},
            },
        ),
        "resonate:target",
    ),
    (
        "task.suspend with no actions",
        envelope("task.suspend", {"id": "wf", "version": 1, "actions": []}),
        "actions",
    ),
    (
        "task.fence with an unknown action kind",
        envelope(
            "task.fence",
            {"id": "wf", "version": 1, "action": {"kind": "promise.get", "data": {"id": "x"}}},
        ),
        "action",
    ),
    ("search limit 0", envelope("promise.search", {"limit": 0}), "limit"),
    ("search limit 1001", envelope("task.search", {"limit": 1001}), "limit"),
    ("unknown search state", envelope("promise.search", {"state": "done"}), "state"),
    (
        "invalid cron",
        envelope("schedule.create", {**SCHEDULE, "cron": "every day"}),
        "cron",
    ),
]


@pytest.mark.parametrize(("name", "body", "names"), BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_a_400_naming_the_problem_and_writes_nothing(
    client: Client, db: Any, name: str, body: str, names: str
) -> None:
    create_task(client, "wf")
    create_promise(client, "ext", {"resonate:external": "true"})
    before = stored()
    status, env = post_raw(client, body)
    assert status == 400, (name, env)
    assert names.lower() in env["data"].lower(), (name, env["data"])
    assert stored() == before
    parsed: Any = None
    with contextlib.suppress(ValueError):
        parsed = json.loads(body)
    if isinstance(parsed, dict) and isinstance(parsed.get("kind"), str):
        assert env["kind"] == parsed["kind"]
        corr = (
            parsed.get("head", {}).get("corrId") if isinstance(parsed.get("head"), dict) else None
        )
        if isinstance(corr, str):
            assert env["head"]["corrId"] == corr


def test_a_body_over_max_body_bytes_is_a_413_and_writes_nothing(client: Client, db: Any) -> None:
    body = envelope("promise.create", {**CREATE, "param": {"data": "x" * 400}})
    with override_settings(RESONATE={"MAX_BODY_BYTES": 200}):
        before = stored()
        status, env = post_raw(client, body)
        assert status == 413
        assert "bytes" in env["data"] or "body" in env["data"], env["data"]
        assert stored() == before
        small = envelope("promise.get", {"id": "nope"})
        assert len(small) < 200
        status, _ = post_raw(client, small)
        assert status == 404


# --- routes ---------------------------------------------------------------------------------


def test_post_root_needs_no_csrf_token_and_is_not_redirected(db: Any) -> None:
    strict = Client(enforce_csrf_checks=True)
    resp = strict.post(
        "/", data=envelope("promise.get", {"id": "nope"}), content_type="application/json"
    )
    assert resp.status_code == 404
    assert json.loads(resp.content)["head"]["status"] == 404
    resp = strict.post(
        "/",
        data=envelope("promise.create", {"id": "p", "timeoutAt": FAR}),
        content_type="application/json",
    )
    assert resp.status_code == 200
    assert "Location" not in resp


def test_get_root_is_not_a_server_error(client: Client, db: Any) -> None:
    assert client.get("/").status_code < 500


def test_health_and_ready_answer_200(client: Client, db: Any) -> None:
    assert client.get("/health").status_code == 200
    assert client.get("/ready").status_code == 200


@pytest.mark.parametrize("path", ["/promises", "/tasks/x", "/schedules", "/promises/p/create"])
@pytest.mark.parametrize("method", ["get", "post"])
def test_legacy_rest_paths_answer_410_with_the_upgrade_message(
    client: Client, db: Any, path: str, method: str
) -> None:
    resp = getattr(client, method)(path)
    assert resp.status_code == 410
    assert json.loads(resp.content) == {"error": LEGACY_MESSAGE}


# --- no client input gets a 500 -------------------------------------------------------------


def ensure_fuzz_objects(client: Client) -> None:
    if Promise.objects.filter(id="fz-t").exists():
        return
    create_task(client, "fz-t")
    create_promise(client, "fz-x", {"resonate:external": "true"})
    create_promise(client, "fz-q", {TARGET: "w"})
    assert post(client, "schedule.create", {**SCHEDULE, "id": "fz-s"})[0] == 200


def post_isolated(client: Client, body: bytes | str) -> tuple[int, dict[str, Any]]:
    """One request inside a savepoint that is always rolled back, so examples do not leak
    into each other (and a failed statement cannot poison the rest of the run)."""
    sid = transaction.savepoint()
    try:
        return post_raw(client, body)
    finally:
        transaction.savepoint_rollback(sid)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)

VALID: dict[str, dict[str, Any]] = {
    "promise.get": {"id": "fz-x"},
    "promise.create": {
        "id": "fz-new",
        "timeoutAt": FAR,
        "param": {"headers": {"a": "b"}, "data": "eA=="},
        "tags": {TARGET: "poll://any@g", "resonate:branch": "fz-new"},
    },
    "promise.settle": {"id": "fz-x", "state": "resolved", "value": {"data": "eA=="}},
    "promise.register_callback": {"awaited": "fz-x", "awaiter": "fz-t"},
    "promise.register_listener": {"awaited": "fz-x", "address": "poll://any@g"},
    "promise.search": {"state": "pending", "tags": {"k": "v"}, "limit": 5, "cursor": "a"},
    "task.get": {"id": "fz-t"},
    "task.create": {
        "pid": "w",
        "ttl": 1000,
        "action": {
            "kind": "promise.create",
            "head": {},
            "data": {"id": "fz-new2", "timeoutAt": FAR, "tags": {TARGET: "w"}},
        },
    },
    "task.acquire": {"id": "fz-q", "version": 0, "pid": "w", "ttl": 1000},
    "task.fence": {
        "id": "fz-t",
        "version": 1,
        "action": {"kind": "promise.create", "head": {}, "data": {"id": "fz-c", "timeoutAt": FAR}},
    },
    "task.heartbeat": {"pid": "w1", "tasks": [{"id": "fz-t", "version": 1}]},
    "task.suspend": {
        "id": "fz-t",
        "version": 1,
        "actions": [
            {
                "kind": "promise.register_callback",
                "head": {},
                "data": {"awaited": "fz-x", "awaiter": "fz-t"},
            }
        ],
    },
    "task.fulfill": {
        "id": "fz-t",
        "version": 1,
        "action": {
            "kind": "promise.settle",
            "head": {},
            "data": {"id": "fz-t", "state": "resolved"},
        },
    },
    "task.release": {"id": "fz-t", "version": 1},
    "task.halt": {"id": "fz-t"},
    "task.continue": {"id": "fz-t"},
    "task.search": {"state": "acquired", "limit": 5, "cursor": "a"},
    "schedule.get": {"id": "fz-s"},
    "schedule.create": {**SCHEDULE, "id": "fz-s2"},
    "schedule.delete": {"id": "fz-s"},
    "schedule.search": {"tags": {"k": "v"}, "limit": 5},
    "debug.tick": {"time": 5},
}


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place inside a JSON value (the value itself included) a mutation can hit."""
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += paths(v, (*prefix, i))
    return found


def mutate(doc: Any, path: tuple[Any, ...], op: str, new: Any, key: str) -> Any:
    if not path:
        return new if op == "replace" else doc
    parent = doc
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if op == "replace":
        parent[last] = new
    elif op == "delete":
        del parent[last]
    elif isinstance(parent[last], dict):
        parent[last][key] = new
    elif isinstance(parent[last], list):
        parent[last].append(new)
    return doc


@st.composite
def mutated_envelopes(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(sorted(VALID)))
    doc: Any = {
        "kind": kind,
        "head": {"corrId": "fz", "version": VERSION},
        "data": copy.deepcopy(VALID[kind]),
    }
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(paths(doc)))
        op = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        doc = mutate(doc, path, op, draw(json_values), draw(st.text(max_size=8)))
    return doc


FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(value=json_values)
def test_no_json_value_gets_a_500(client: Client, db: Any, value: Any) -> None:
    status, env = post_isolated(client, json.dumps(value))
    assert status < 500, (value, env)


@FUZZ
@given(doc=mutated_envelopes())
def test_no_mutated_envelope_gets_a_500(client: Client, db: Any, doc: Any) -> None:
    ensure_fuzz_objects(client)
    status, env = post_isolated(client, json.dumps(doc))
    assert status < 500, (doc, env)


@FUZZ
@given(body=st.binary(max_size=64))
def test_no_byte_string_gets_a_500(client: Client, db: Any, body: bytes) -> None:
    status, env = post_isolated(client, body)
    assert status < 500, (body, env)


# Inputs a type check lets through but a database may refuse: NUL characters, unpaired
# surrogates, over-long index keys, integers whose sums overflow a 64-bit column.
EDGE_REQUESTS: list[tuple[str, str, dict[str, Any]]] = [
    ("NUL in an id", "promise.create", {"id": "a\x00b", "timeoutAt": FAR}),
    ("NUL in a get id", "promise.get", {"id": "a\x00b"}),
    ("NUL in a tag value", "promise.create", {"id": "n1", "timeoutAt": FAR, "tags": {"k": "\x00"}}),
    ("NUL in a tag key", "promise.create", {"id": "n2", "timeoutAt": FAR, "tags": {"\x00": "v"}}),
    (
        "NUL in param data",
        "promise.create",
        {"id": "n3", "timeoutAt": FAR, "param": {"data": "\x00"}},
    ),
    ("NUL in a search cursor", "promise.search", {"cursor": "\x00"}),
    ("NUL in a search tag", "promise.search", {"tags": {"k": "\x00"}}),
    ("an unpaired surrogate in an id", "promise.create", {"id": "\ud800", "timeoutAt": FAR}),
    ("1024 four-byte characters in an id", "promise.create", {"id": "😀" * 1024, "timeoutAt": FAR}),
    (
        "a 20000-character branch tag",
        "promise.create",
        {"id": "n4", "timeoutAt": FAR, "tags": {"resonate:branch": "b" * 20_000}},
    ),
    (
        "a 4000-character listener address",
        "promise.register_listener",
        {"awaited": "fz-x", "address": "http://" + "h" * 4000},
    ),
    (
        "a ttl that overflows the lease deadline",
        "task.acquire",
        {"id": "fz-q", "version": 0, "pid": "w", "ttl": 2**63 - 1},
    ),
    (
        "a task.create ttl that overflows the lease deadline",
        "task.create",
        {
            "pid": "w",
            "ttl": 2**63 - 1,
            "action": {
                "kind": "promise.create",
                "data": {"id": "n5", "timeoutAt": FAR, "tags": {TARGET: "w"}},
            },
        },
    ),
    (
        "a resonate:delay beyond 64 bits",
        "promise.create",
        {"id": "n6", "timeoutAt": FAR, "tags": {TARGET: "w", "resonate:delay": "9" * 30}},
    ),
    ("an integer beyond 64 bits", "promise.create", {"id": "n7", "timeoutAt": 2**80}),
    ("a search limit beyond 64 bits", "promise.search", {"limit": 2**80}),
]


@pytest.mark.parametrize(("name", "kind", "data"), EDGE_REQUESTS, ids=[c[0] for c in EDGE_REQUESTS])
def test_edge_values_are_never_a_500(
    client: Client, db: Any, name: str, kind: str, data: dict[str, Any]
) -> None:
    ensure_fuzz_objects(client)
    body = json.dumps({"kind": kind, "head": {"corrId": "edge"}, "data": data})
    status, env = post_isolated(client, body)
    assert status < 500, (name, env)


def test_the_envelope_pool_has_one_thread_on_sqlite_two_on_postgresql_unless_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RESONATE_WEB_THREADS")  # the suite runs handlers on Django's thread
    resonate_settings.cache_clear()
    try:
        assert web_threads() == (1 if connection.vendor == "sqlite" else 2)
        with override_settings(RESONATE={"WEB_THREADS": 3}):
            assert web_threads() == 3
        with override_settings(RESONATE={"WEB_THREADS": 0}):
            assert web_threads() == 0
    finally:
        monkeypatch.undo()
        resonate_settings.cache_clear()


def test_a_retired_setting_is_accepted_with_a_warning_and_an_unknown_one_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A site that still names LOOP_CONNECTIONS (earlier releases' event-loop path) keeps
    starting; a misspelt setting is still an error naming it."""
    try:
        with (
            override_settings(RESONATE={"LOOP_CONNECTIONS": 2, "BATCH_MAX": 8}),
            caplog.at_level("WARNING", logger="resonate.settings"),
        ):
            assert resonate_settings().BATCH_MAX == 8
            assert "LOOP_CONNECTIONS" in caplog.text
            assert "retired and ignored" in caplog.text
        with (
            override_settings(RESONATE={"BATCH_MAXX": 8}),
            pytest.raises(ValueError, match="unknown RESONATE settings: BATCH_MAXX"),
        ):
            resonate_settings()
    finally:
        resonate_settings.cache_clear()


def test_the_envelope_threads_answer_each_call_into_its_own_loop_errors_included() -> None:
    handlers = HandlerThreads(2)
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

    def fail() -> None:
        raise ValueError("handler failed")

    async def main() -> tuple[list[str], str]:
        marker.set("request")
        run = contextvars.copy_context().run
        answers = await asyncio.gather(
            *(handlers.run(functools.partial(str, f"call {i}")) for i in range(20))
        )
        with pytest.raises(ValueError, match="handler failed"):
            await handlers.run(fail)
        abandoned = handlers.run(lambda: time.sleep(0.05))
        abandoned.cancel()  # its answer arrives after the cancel and is dropped
        seen = await handlers.run(lambda: run(marker.get))
        return answers, seen

    try:
        answers, seen = asyncio.run(main())
        assert answers == [f"call {i}" for i in range(20)]
        assert seen == "request"  # the request's context variables go with the call
        assert asyncio.run(_one(handlers)) == "still serving"  # no thread was lost
    finally:
        handlers.stop()
    assert not any(t.is_alive() for t in handlers._threads)


async def _one(handlers: HandlerThreads) -> str:
    answer: str = await handlers.run(lambda: "still serving")
    return answer
