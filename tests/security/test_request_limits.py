"""Issue #23: request sizes and values no database or clock can hold. Each is refused at the edge
with a 4xx naming the field and the limit, and writes nothing; a value the protocol allows (an
instant past year 9999) is stored, and every page that shows it renders."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection, connections, transaction
from django.test import Client, override_settings

from promises.models import Promise
from promises.services import promise_create
from resonate_project.core import cron
from resonate_project.core.errors import InvalidRequest
from resonate_project.core.limits import unstorable
from resonate_project.edges.envelope import _failure
from tasks_app.models import Task
from tasks_app.services import task_heartbeat
from tests.security.test_limits import post_envelope, refused, rest_error, snapshot
from tests.support.factories import FAR, Api

TARGET = "resonate:target"
WORKERS = {TARGET: "poll://any@workers"}
# Past 9999-12-31, the last instant a datetime holds; the wire accepts any non-negative integer.
YEAR_10000 = 253_402_300_800_000
MS_MAX = 2**63 - 1


def envelope(kind: str, data: dict[str, Any], head: dict[str, Any] | None = None) -> str:
    return json.dumps({"kind": kind, "head": {"corrId": "c", **(head or {})}, "data": data})


def create_task(api: Api, task_id: str, ttl: int = 60_000, timeout_at: int = FAR) -> None:
    action = {
        "kind": "promise.create",
        "data": {"id": task_id, "timeoutAt": timeout_at, "tags": WORKERS},
    }
    res = api("task.create", pid="w", ttl=ttl, action=action)
    assert res.status == 200, res.data


@pytest.fixture
def root(db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    return client


# --- 6: instants past year 9999 -----------------------------------------------------------------


@pytest.mark.parametrize("timeout_at", [YEAR_10000, 2**53 - 1, MS_MAX])
def test_a_timeout_past_year_9999_is_stored_and_every_page_showing_it_renders(
    api: Api, root: Client, timeout_at: int
) -> None:
    """The finding: such a timeoutAt made /admin/promises/promise/ answer 500."""
    assert api("promise.create", id="far", timeoutAt=timeout_at, tags=WORKERS).ok
    assert Promise.objects.get(pk="far").timeout_at == timeout_at
    for url in (
        "/admin/promises/promise/",
        "/admin/promises/promise/far/change/",
        "/admin/tasks_app/task/",
        "/admin/tasks_app/task/far/change/",
        "/admin/",
        "/admin/overview/",
    ):
        res = root.get(url)
        assert res.status_code == 200, (url, res.status_code)
    assert f"{timeout_at} ms" in root.get("/admin/promises/promise/").content.decode()
    res = root.get("/api/promises/far")
    assert res.status_code == 200, res.content
    assert res.json()["timeoutAt"] == timeout_at
    assert root.get("/api/tasks/far").status_code == 200
    assert root.get("/api/promises").status_code == 200


def test_a_lease_past_year_9999_renders_in_the_task_list_and_detail(api: Api, root: Client) -> None:
    """The finding: a huge ttl made /admin/tasks_app/task/ answer 500."""
    create_task(api, "leased", ttl=MS_MAX)
    assert Task.objects.get(pk="leased").expires_at == MS_MAX  # saturated, as the wire allows
    res = root.get("/admin/tasks_app/task/")
    assert res.status_code == 200
    assert f"{MS_MAX} ms" in res.content.decode()
    assert root.get("/admin/tasks_app/task/leased/change/").status_code == 200
    res = root.get("/api/tasks/leased")
    assert res.status_code == 200, res.content


# --- 12: list lengths ---------------------------------------------------------------------------


def heartbeat_body(count: int) -> str:
    refs = [{"id": f"t{i}", "version": 1} for i in range(count)]
    return envelope("task.heartbeat", {"pid": "w", "tasks": refs})


def test_a_heartbeat_with_300000_refs_is_a_400_naming_tasks_and_the_limit(
    client: Client, api: Api
) -> None:
    """The finding: it answered 503 "database unavailable; retry" (really too many SQL
    variables), so the SDK retried it forever."""
    create_task(api, "t0")
    before = snapshot()
    status, data = post_envelope(client, heartbeat_body(300_000))
    assert status == 400, data
    assert "`tasks` has 300000 items; at most 10000 are allowed (MAX_LIST_ITEMS)" in data
    assert snapshot() == before


def test_a_heartbeat_at_max_list_items_extends_the_lease_one_more_is_a_400(api: Api) -> None:
    limit = 10_000
    create_task(api, "t0", ttl=1_000)  # acquired at version 1 until 2_000
    refs = [{"id": f"t{i}", "version": 1} for i in range(limit)]
    res = api("task.heartbeat", now=1_500, pid="w", tasks=refs)
    assert res.status == 200, res.data
    assert Task.objects.get(pk="t0").expires_at == 2_500
    before = snapshot()
    res = api("task.heartbeat", now=2_500, pid="w", tasks=[*refs, {"id": "one-more", "version": 1}])
    refused(res, 400, "`tasks` has 10001 items", "MAX_LIST_ITEMS", str(limit))
    assert snapshot() == before


def test_max_list_items_is_a_setting_and_python_callers_get_the_same_refusal(api: Api) -> None:
    create_task(api, "t0")
    with override_settings(RESONATE={"MAX_LIST_ITEMS": 2}):
        before = snapshot()
        with pytest.raises(InvalidRequest) as refusal:
            task_heartbeat(pid="w", tasks=[("t0", 1), ("t1", 1), ("t2", 1)], now=2_000)
        assert refusal.value.field == "tasks"
        assert "at most 2 are allowed (MAX_LIST_ITEMS)" in refusal.value.message
        assert snapshot() == before
        task_heartbeat(pid="w", tasks=[("t0", 1), ("t1", 1)], now=2_000)


def suspend(api: Api, count: int) -> Any:
    actions = [
        {"kind": "promise.register_callback", "data": {"awaited": f"a{i}", "awaiter": "t0"}}
        for i in range(count)
    ]
    return api("task.suspend", id="t0", version=1, actions=actions)


def test_a_suspend_with_more_actions_than_max_list_items_is_a_400_naming_actions(
    api: Api,
) -> None:
    create_task(api, "t0")
    for i in range(3):
        assert api("promise.create", id=f"a{i}", timeoutAt=FAR, tags={"resonate:external": "true"})
    with override_settings(RESONATE={"MAX_LIST_ITEMS": 2}):
        before = snapshot()
        refused(suspend(api, 3), 400, "`actions` has 3 items", "(MAX_LIST_ITEMS)")
        assert snapshot() == before
    before = snapshot()
    refused(suspend(api, 10_001), 400, "`actions` has 10001 items", "MAX_LIST_ITEMS")
    assert snapshot() == before
    with override_settings(RESONATE={"MAX_LIST_ITEMS": 2}):
        assert suspend(api, 2).status == 200
    assert Task.objects.get(pk="t0").state == "suspended"


def refused_statement() -> OperationalError:
    """The database's refusal of a statement over one of its limits: SQLite's "too many SQL
    variables" (the heartbeat's finding), PostgreSQL's program_limit_exceeded (54000)."""
    if connection.vendor == "sqlite":
        sql, params = f"SELECT 1 WHERE 1 IN ({','.join(['%s'] * 300_000)})", list(range(300_000))
    else:
        sql, params = "SELECT repeat('x', %s)", [2**30]
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
    except OperationalError as exc:
        return exc
    raise AssertionError("the database ran the statement")


def test_a_statement_the_database_refuses_is_a_500_not_a_retryable_503(db: Any) -> None:
    res = _failure("task.heartbeat", refused_statement())
    assert (res.status, res.data) == (500, "internal server error")


def test_an_unreachable_database_is_still_a_retryable_503(db: Any) -> None:
    params = dict(connections[DEFAULT_DB_ALIAS].settings_dict)
    if connection.vendor == "sqlite":
        params["NAME"] = "/nonexistent/directory/db.sqlite3"
    else:
        params.update(HOST="127.0.0.1", PORT="1")
    unreachable = type(connections[DEFAULT_DB_ALIAS])(params, alias="unreachable")
    try:
        with pytest.raises(OperationalError) as raised:
            unreachable.ensure_connection()
    finally:
        unreachable.close()
    res = _failure("promise.get", raised.value)
    assert (res.status, res.data) == (503, "database unavailable; retry the request")


# --- 16: schedules past year 9999 ---------------------------------------------------------------


def schedule(**extra: Any) -> dict[str, Any]:
    return {"id": "s", "cron": "* * * * *", "promiseId": "{{.id}}", "promiseTimeout": 1, **extra}


@pytest.mark.parametrize("now", [cron.LAST_RUN_MS - 1000, YEAR_10000, MS_MAX])
def test_schedule_create_under_a_debug_clock_past_year_9999_is_a_400_naming_the_limit(
    client: Client, db: Any, now: int
) -> None:
    """The finding: schedule.create answered 500 (croniter cannot represent the next run)."""
    before = snapshot()
    with override_settings(RESONATE={"DEBUG": True}):
        body = envelope("schedule.create", schedule(), {"resonate:debug_time": now})
        status, data = post_envelope(client, body)
    assert status == 400, data
    assert f"has no occurrence after {now} ms" in data
    assert "9999-12-31 23:59:59.999 UTC" in data
    assert snapshot() == before


def test_a_schedule_with_its_last_run_in_9999_is_created_and_renders(
    api: Api, root: Client
) -> None:
    res = api("schedule.create", now=cron.LAST_RUN_MS - 90_000, **schedule())
    assert res.status == 200, res.data
    assert res.data["schedule"]["nextRunAt"] == cron.LAST_RUN_MS - 59_999  # 23:59:00 UTC
    page = root.get("/admin/schedules/schedule/s/change/")
    assert page.status_code == 200
    assert page.content.decode().count("9999-12-31 23:59:00.000 UTC") == 1  # nothing after it
    assert root.get("/admin/schedules/schedule/").status_code == 200
    assert root.get("/api/schedules/s").status_code == 200


def test_an_overdue_schedule_renders_its_detail_page(api: Api, root: Client) -> None:
    """Found on the way: the "already due" note was built with ``format_html`` and no
    arguments, which Django 6 refuses (500)."""
    assert api("schedule.create", now=1_000, **schedule()).ok
    res = root.get("/admin/schedules/schedule/s/change/")
    assert res.status_code == 200
    assert "The first is already due" in res.content.decode()


def test_next_after_raises_no_next_run_past_the_last_representable_instant() -> None:
    assert cron.next_after("* * * * * *", cron.LAST_RUN_MS - 1000) == cron.LAST_RUN_MS - 999
    for expr, instant in [
        ("* * * * * *", cron.LAST_RUN_MS - 999),
        ("* * * * *", cron.LAST_RUN_MS - 59_999),
        ("0 0 29 2 *", cron.LAST_RUN_MS - 400 * 86_400_000),  # no 29 February after 9996
        ("* * * * *", MS_MAX),
    ]:
        with pytest.raises(cron.NoNextRun, match=r"9999-12-31 23:59:59\.999 UTC"):
            cron.next_after(expr, instant)


# --- values no database can store ---------------------------------------------------------------

NUL, SURROGATE = "\x00", "\ud800"


def poison_requests(bad: str) -> list[tuple[str, dict[str, Any], str]]:
    """Requests that carry ``bad`` in a stored or keyed string, and the field each names."""
    create = {"id": "p", "timeoutAt": FAR}
    return [
        ("promise.create", {**create, "id": f"p{bad}"}, "$.data.id"),
        ("promise.create", {**create, "tags": {f"k{bad}": "v"}}, "$.data.tags"),
        ("promise.create", {**create, "tags": {"k": f"v{bad}"}}, "$.data.tags.k"),
        ("promise.create", {**create, "tags": {TARGET: f"poll://any@g{bad}"}}, "$.data.tags"),
        ("promise.create", {**create, "param": {"data": bad}}, "$.data.param.data"),
        ("promise.create", {**create, "param": {"headers": {"h": bad}}}, "$.data.param.headers"),
        (
            "task.create",
            {
                "pid": "w",
                "ttl": 1000,
                "action": {"kind": "promise.create", "data": {**create, "id": f"t{bad}"}},
            },
            "$.data.action.data.id",
        ),
        ("task.create", {"pid": f"w{bad}", "ttl": 1000, "action": {}}, "$.data.pid"),
        ("schedule.create", schedule(id=f"s{bad}"), "$.data.id"),
        ("schedule.create", schedule(promiseId=f"x{bad}"), "$.data.promiseId"),
        ("schedule.create", schedule(promiseTags={bad: "v"}), "$.data.promiseTags"),
        ("schedule.create", schedule(promiseParam={"data": bad}), "$.data.promiseParam.data"),
        (
            "promise.register_listener",
            {"awaited": "ext", "address": f"poll://any@g/{bad}"},
            "$.data.address",
        ),
        (
            "promise.settle",
            {"id": "ext", "state": "resolved", "value": {"data": bad}},
            "$.data.value.data",
        ),
        ("promise.search", {"tags": {"k": bad}}, "$.data.tags"),
    ]


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["NUL", "surrogate"])
def test_strings_no_database_can_store_are_a_400_naming_the_field_and_write_nothing(
    client: Client, api: Api, bad: str
) -> None:
    assert api("promise.create", id="ext", timeoutAt=FAR, tags={"resonate:external": "true"})
    before = snapshot()
    for kind, data, field in poison_requests(bad):
        status, message = post_envelope(client, envelope(kind, data))
        assert status == 400, (kind, data, message)
        assert f"`{field}" in message, (kind, field, message)
        assert ("NUL (\\u0000)" if bad == NUL else "surrogate (\\ud800)") in message, message
    assert snapshot() == before


def test_a_surrogate_sent_as_raw_utf8_bytes_is_a_400_naming_the_field(
    client: Client, db: Any
) -> None:
    body = b'{"kind":"promise.create","head":{},"data":{"id":"p\xed\xa0\x80","timeoutAt":1}}'
    status, message = post_envelope(client, body)
    assert (status, message) == (400, "`$.data.id` may not contain a UTF-16 surrogate (\\ud800)")
    assert not Promise.objects.exists()


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["NUL", "surrogate"])
def test_python_callers_get_the_same_refusal_naming_the_field(api: Api, bad: str) -> None:
    before = snapshot()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"id": f"p{bad}"}, "id"),
        ({"id": "p", "tags": {f"k{bad}": "v"}}, "tags"),
        ({"id": "p", "tags": {"k": bad}}, "tags.k"),
        ({"id": "p", "param": {"data": bad}}, "param.data"),
    ]
    for kwargs, field in cases:
        with pytest.raises(InvalidRequest) as refusal:
            promise_create(timeout_at=FAR, now=1_000, **kwargs)
        assert refusal.value.field == field, refusal.value.message
    assert snapshot() == before


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/promises", {"id": "p", "timeoutAt": FAR, "tags": {"k\ud800": "v"}}, "tags"),
        ("/api/promises", {"id": "p", "timeoutAt": FAR, "tags": {"\x00": "v"}}, "tags"),
        (
            "/api/promises",
            {"id": "p", "timeoutAt": FAR, "param": {"headers": {"\udc00": "x"}}},
            "param.headers",
        ),
        ("/api/schedules", schedule(promiseTags={"\ud800": "v"}), "promiseTags"),
    ],
)
def test_the_resource_api_refuses_unstorable_tag_and_header_keys(
    client: Client, db: Any, url: str, body: dict[str, Any], field: str
) -> None:
    """They answered 500 (DRF validates a dict's values, not its keys)."""
    before = snapshot()
    status, named, _ = rest_error(client.post(url, json.dumps(body), "application/json"))
    assert (status, named) == (400, field)
    assert snapshot() == before


def test_a_path_id_with_nul_on_the_resource_api_is_a_400(client: Client, db: Any) -> None:
    """It answered 500 on PostgreSQL (the lookup sent NUL)."""
    status, _, message = rest_error(client.get("/api/promises/a%00b"))
    assert status == 400
    assert "NUL" in message


def test_unstorable_finds_nul_and_every_surrogate_and_passes_the_rest() -> None:
    assert unstorable("plain ascii") is None
    assert unstorable("é😀 ok") is None
    assert unstorable("a\x00") == "NUL (\\u0000)"
    assert unstorable("x\udfff") == "a UTF-16 surrogate (\\udfff)"
    assert unstorable("\ud83d\ude00") == "a UTF-16 surrogate (\\ud83d)"  # two code points
