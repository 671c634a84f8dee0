"""Hard limits (the trust boundary): each breach is a 4xx naming the limit and the field, never a
500, and writes nothing; exactly at a limit is accepted. One test per finding."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models import Model
from django.test import Client, override_settings

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.core import cron
from resonate_project.core.conf import resonate_settings
from resonate_project.core.tags import parse_delay
from resonate_project.edges.json_depth import too_deep
from resonate_project.edges.rest.pagination import LINK_RESERVE
from resonate_project.engine.search import RESPONSE_RESERVE
from schedules.models import CRON_MAX_LENGTH, Schedule
from tasks_app.models import Task
from tests.support.factories import FAR, Api

TARGET = "resonate:target"
DELAY = "resonate:delay"
EXTERNAL = {"resonate:external": "true"}
VERSION = "2026-04-01"


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every stored row, for "this request wrote nothing" assertions."""
    models: tuple[type[Model], ...] = (Promise, Task, Callback, Listener, Message, Schedule)
    return {
        m.__name__: [dict(row) for row in m._default_manager.order_by("pk").values()]
        for m in models
    }


def refused(res: Any, status: int, *words: str) -> None:
    assert res.status == status, res.data
    assert isinstance(res.data, str)
    for word in words:
        assert word in res.data, res.data


def post_envelope(client: Client, body: bytes | str) -> tuple[int, Any]:
    res = client.post("/", data=body, content_type="application/json")
    env = json.loads(res.content)
    assert env["head"]["status"] == res.status_code, env
    return res.status_code, env["data"]


def rest_error(res: Any) -> tuple[int, str | None, str]:
    body = res.json()
    assert set(body) == {"error"}, body
    return body["error"]["status"], body["error"]["field"], body["error"]["message"]


def tags_of(count: int, size: int = 0) -> dict[str, str]:
    """``count`` tags, one of them ``resonate:target``, whose keys and values hold ``size``
    bytes of UTF-8 in all (0: as few as they come)."""
    tags = {TARGET: "poll://any@w", **{f"{i:x}": "" for i in range(count - 1)}}
    used = sum(len(k) + len(v) for k, v in tags.items())
    if size:
        assert size >= used
        tags["0"] = "v" * (size - used)
    return tags


def cron_of_length(n: int) -> str:
    """A valid cron expression of exactly ``n`` characters (a long minute list)."""
    entries = ["0"] * ((n - 8 + 1) // 2)
    if (n - 8) % 2 == 0:
        entries[-1] = "10"
    expr = ",".join(entries) + " * * * *"
    assert len(expr) == n, expr
    assert cron.valid(expr), expr
    return expr


def acquired(api: Api, task_id: str) -> None:
    action = {
        "kind": "promise.create",
        "data": {"id": task_id, "timeoutAt": FAR, "tags": {TARGET: "poll://any@w"}},
    }
    res = api("task.create", pid="w", ttl=60_000, action=action)
    assert res.status == 200, res.data


# --- resonate:delay ---------------------------------------------------------------------------


def test_a_120kb_delay_is_a_400_and_writes_nothing(api: Api) -> None:
    before = snapshot()
    tags = {TARGET: "poll://any@w", DELAY: "9" * 120_000}
    res = api("promise.create", id="d", timeoutAt=FAR, tags=tags)
    refused(res, 400, "MAX_DELAY_CHARS", f"tags.{DELAY}")
    res = api(
        "task.create",
        pid="w",
        ttl=1000,
        action={"kind": "promise.create", "data": {"id": "d", "timeoutAt": FAR, "tags": tags}},
    )
    refused(res, 400, "MAX_DELAY_CHARS", f"action.data.tags.{DELAY}")
    assert snapshot() == before


def test_a_delay_at_max_delay_chars_is_accepted_and_capped_at_the_deadline(api: Api) -> None:
    limit = resonate_settings().MAX_DELAY_CHARS
    tags = {TARGET: "poll://any@w", DELAY: "9" * limit}
    assert api("promise.create", id="d", timeoutAt=50_000, tags=tags).status == 200
    assert Task.objects.get(pk="d").retry_at == 50_000  # the deadline caps the delay
    tags[DELAY] = "9" * (limit + 1)
    refused(api("promise.create", id="e", timeoutAt=FAR, tags=tags), 400, "MAX_DELAY_CHARS")


def test_parse_delay_keeps_digit_folding_and_saturates_past_every_instant() -> None:
    assert parse_delay("x1y2z3") == 123
    assert parse_delay("0007") == 7
    assert parse_delay("no digits") == 0
    assert parse_delay("9" * 19) == 10**19 - 1
    assert parse_delay("1" + "0" * 500_000) >= 2**63  # stored before the cap: still total
    assert parse_delay("0" * 500_000 + "42") == 42


# --- JSON nesting -----------------------------------------------------------------------------


def test_10000_levels_of_nesting_on_post_root_is_a_400_and_writes_nothing(
    client: Client, db: Any
) -> None:
    nested = "[" * 10_000 + "]" * 10_000
    before = snapshot()
    for body in (
        f'{{"kind":"promise.create","head":{{}},"data":{{"id":"p","timeoutAt":1,"x":{nested}}}}}',
        f'{{"kind":"promise.get","head":{{"x":{nested}}},"data":{{"id":"p"}}}}',
        nested,
    ):
        status, data = post_envelope(client, body)
        assert status == 400
        assert data == "JSON nesting deeper than 64 (MAX_JSON_DEPTH)"
    assert snapshot() == before


def test_nesting_exactly_at_max_json_depth_is_accepted_one_more_is_not(
    client: Client, db: Any
) -> None:
    limit = resonate_settings().MAX_JSON_DEPTH

    def body(depth: int) -> str:  # the envelope and its head are two levels
        x = "[" * (depth - 2) + "]" * (depth - 2)
        return f'{{"kind":"promise.get","head":{{"x":{x},"s":"[[[[{{{{"}},"data":{{"id":"p"}}}}'

    assert post_envelope(client, body(limit))[0] == 404
    status, data = post_envelope(client, body(limit + 1))
    assert (status, data) == (400, f"JSON nesting deeper than {limit} (MAX_JSON_DEPTH)")


def test_10000_levels_of_nesting_on_the_resource_api_is_a_400(client: Client, db: Any) -> None:
    nested = "[" * 10_000 + "]" * 10_000
    before = snapshot()
    for url in ("/api/promises", "/api/promises/p/settle", "/api/schedules"):
        body = f'{{"id":"p","timeoutAt":1,"param":{{"data":"x"}},"tags":{{}},"x":{nested}}}'
        res = client.post(url, body, "application/json")
        assert rest_error(res) == (400, None, "JSON nesting deeper than 64 (MAX_JSON_DEPTH)")
    assert snapshot() == before


def test_the_depth_scan_ignores_brackets_inside_strings() -> None:
    assert not too_deep(b'{"a":"' + b"[{" * 1000 + b'\\"' + b"[" * 100 + b'"}', 4)
    assert not too_deep(b'["\\\\", "' + b"[" * 100 + b'"]', 2)
    assert too_deep(b'["\\\\"' + b"[" * 10 + b"]" * 10 + b"]", 8)
    assert too_deep(b"[" * 65, 64)
    assert not too_deep(b"[" * 64 + b"]" * 64 + b"[]" * 1000, 64)


# --- search tags ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["promise.search", "schedule.search"])
def test_1100_search_tags_are_a_400(api: Api, kind: str) -> None:
    api("promise.create", id="p", timeoutAt=FAR, tags={"a": "1"})
    before = snapshot()
    res = api(kind, tags={f"k{i}": "v" for i in range(1100)})
    refused(res, 400, "MAX_SEARCH_TAGS", "`tags`")
    assert snapshot() == before


@pytest.mark.parametrize("kind", ["promise.search", "schedule.search"])
def test_search_tags_at_the_limit_are_accepted_one_more_is_not(api: Api, kind: str) -> None:
    limit = resonate_settings().MAX_SEARCH_TAGS
    tags = {f"k{i}": "v" for i in range(limit)}
    assert api("promise.create", id="p", timeoutAt=FAR, tags=tags).ok
    assert api(
        "schedule.create",
        id="s",
        cron="* * * * *",
        promiseId="{{.id}}",
        promiseTimeout=1,
        promiseTags=tags,
    ).ok
    res = api(kind, tags=tags)
    assert res.status == 200, res.data
    assert len(next(iter(res.data.values()))) == 1
    refused(api(kind, tags={**tags, "one": "more"}), 400, "MAX_SEARCH_TAGS")


@pytest.mark.parametrize("url", ["/api/promises", "/api/tasks", "/api/schedules"])
def test_too_many_tag_filters_on_the_resource_api_are_a_400(
    client: Client, db: Any, url: str
) -> None:
    limit = resonate_settings().MAX_SEARCH_TAGS
    ok = client.get(url, {"tag": [f"k{i}=v" for i in range(limit)]})
    assert ok.status_code == 200, ok.content
    res = client.get(url, {"tag": [f"k{i}=v" for i in range(limit + 1)]})
    status, field, message = rest_error(res)
    assert (status, field) == (400, "tag")
    assert "MAX_SEARCH_TAGS" in message
    res = client.get(url, {"tag": [f"k{i}=v" for i in range(1100)]})  # Django's own limit
    status, field, message = rest_error(res)
    assert (status, field) == (400, None)
    assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in message


# --- tags per promise -------------------------------------------------------------------------


def create_requests(tags: dict[str, str]) -> list[tuple[str, dict[str, Any], str]]:
    """Every request that creates promises with ``tags``, and the field it names."""
    return [
        ("promise.create", {"id": "c", "timeoutAt": FAR, "tags": tags}, "tags"),
        (
            "task.create",
            {
                "pid": "w",
                "ttl": 1000,
                "action": {
                    "kind": "promise.create",
                    "data": {"id": "c", "timeoutAt": FAR, "tags": tags},
                },
            },
            "action.data.tags",
        ),
        (
            "task.fence",
            {
                "id": "holder",
                "version": 1,
                "action": {
                    "kind": "promise.create",
                    "data": {"id": "c", "timeoutAt": FAR, "tags": tags},
                },
            },
            "action.data.tags",
        ),
        (
            "schedule.create",
            {
                "id": "c",
                "cron": "* * * * *",
                "promiseId": "{{.id}}",
                "promiseTimeout": 1,
                "promiseTags": tags,
            },
            "promiseTags",
        ),
    ]


@pytest.mark.parametrize(
    "index", range(4), ids=["promise.create", "task.create", "task.fence", "schedule.create"]
)
def test_max_tags_at_the_limit_is_accepted_one_more_is_a_400(api: Api, index: int) -> None:
    limit = resonate_settings().MAX_TAGS
    acquired(api, "holder")
    kind, data, field = create_requests(tags_of(limit + 1))[index]
    before = snapshot()
    refused(api(kind, **data), 400, "MAX_TAGS", f"`{field}` has {limit + 1} tags")
    assert snapshot() == before
    kind, data, _ = create_requests(tags_of(limit))[index]
    res = api(kind, **data)
    assert res.status == 200, res.data
    if kind == "task.fence":
        assert res.data["action"]["head"]["status"] == 200


@pytest.mark.parametrize(
    "index", range(4), ids=["promise.create", "task.create", "task.fence", "schedule.create"]
)
def test_max_tag_bytes_at_the_limit_is_accepted_one_more_is_a_400(api: Api, index: int) -> None:
    limit = resonate_settings().MAX_TAG_BYTES
    acquired(api, "holder")
    kind, data, field = create_requests(tags_of(4, limit + 1))[index]
    before = snapshot()
    refused(api(kind, **data), 400, "MAX_TAG_BYTES", f"`{field}` holds {limit + 1} bytes")
    assert snapshot() == before
    kind, data, _ = create_requests(tags_of(4, limit))[index]
    res = api(kind, **data)
    assert res.status == 200, res.data
    if kind == "task.fence":
        assert res.data["action"]["head"]["status"] == 200


def test_multibyte_tags_count_utf8_bytes(api: Api) -> None:
    limit = resonate_settings().MAX_TAG_BYTES
    tags = {"k": "é" * ((limit - 1) // 2)}  # 2 bytes each
    assert api("promise.create", id="a", timeoutAt=FAR, tags=tags).ok
    tags = {"k": "é" * ((limit - 1) // 2 + 1)}
    refused(api("promise.create", id="b", timeoutAt=FAR, tags=tags), 400, "MAX_TAG_BYTES")


def test_a_target_over_1024_bytes_is_a_400(api: Api) -> None:
    before = snapshot()
    tags = {TARGET: "poll://any@" + "g" * 1014}
    refused(api("promise.create", id="t", timeoutAt=FAR, tags=tags), 400, f"tags.{TARGET}", "1024")
    assert snapshot() == before
    tags = {TARGET: "poll://any@" + "g" * 1013}
    assert api("promise.create", id="t", timeoutAt=FAR, tags=tags).ok


@pytest.mark.parametrize(
    ("url", "body", "field"),
    [
        ("/api/promises", {"id": "r", "timeoutAt": FAR}, "tags"),
        (
            "/api/schedules",
            {"id": "r", "cron": "* * * * *", "promiseId": "{{.id}}", "promiseTimeout": 1},
            "promiseTags",
        ),
    ],
)
def test_resource_api_creates_apply_the_tag_limits(
    client: Client, db: Any, url: str, body: dict[str, Any], field: str
) -> None:
    limit = resonate_settings().MAX_TAGS
    key = "tags" if field == "tags" else "promiseTags"
    before = snapshot()
    res = client.post(url, json.dumps({**body, key: tags_of(limit + 1)}), "application/json")
    status, named, message = rest_error(res)
    assert (status, named) == (400, field)
    assert "MAX_TAGS" in message
    assert snapshot() == before
    res = client.post(url, json.dumps({**body, key: tags_of(limit)}), "application/json")
    assert res.status_code == 200, res.content


# --- search response size ---------------------------------------------------------------------

RECORD_DATA = 20_000  # bytes of param data per record
CAP = RESPONSE_RESERVE + 3 * (RECORD_DATA + 1000)  # about three records a page


@pytest.fixture
def small_cap() -> Iterator[int]:
    with override_settings(RESONATE={"MAX_SEARCH_RESPONSE_BYTES": CAP}):
        yield CAP


def big_promises(api: Api, count: int) -> list[str]:
    ids = [f"p{i:02d}" for i in range(count)]
    for promise_id in ids:
        tags = {TARGET: "poll://any@w"}
        res = api(
            "promise.create",
            id=promise_id,
            timeoutAt=FAR,
            param={"data": "x" * RECORD_DATA},
            tags=tags,
        )
        assert res.ok
        res = api(
            "schedule.create",
            id=promise_id,
            cron="* * * * *",
            promiseId="{{.id}}",
            promiseTimeout=1,
            promiseParam={"data": "x" * RECORD_DATA},
        )
        assert res.ok
    return ids


@pytest.mark.parametrize(
    ("kind", "key"), [("promise.search", "promises"), ("schedule.search", "schedules")]
)
def test_a_search_page_stops_at_max_search_response_bytes_with_a_cursor_to_the_rest(
    api: Api, small_cap: int, kind: str, key: str
) -> None:
    ids = big_promises(api, 10)
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        data: dict[str, Any] = {"limit": 100} if cursor is None else {"cursor": cursor}
        res = api(kind, **data)
        assert res.status == 200, res.data
        records = res.data[key]
        assert 1 <= len(records) <= 3
        assert len(json.dumps(res.data)) <= small_cap
        seen += [r["id"] for r in records]
        pages += 1
        cursor = res.data.get("cursor")
        if cursor is None:
            break
        assert cursor == records[-1]["id"]
    assert seen == ids
    assert pages >= 4


def test_a_task_search_page_stops_at_max_search_response_bytes(api: Api) -> None:
    for i in range(6):
        api("promise.create", id=f"t{i}", timeoutAt=FAR, tags={TARGET: "poll://any@w"})
    one = len(json.dumps(api("task.search", limit=1).data["tasks"][0], separators=(",", ":")))
    with override_settings(RESONATE={"MAX_SEARCH_RESPONSE_BYTES": RESPONSE_RESERVE + 2 * one + 3}):
        first = api("task.search").data
        assert [t["id"] for t in first["tasks"]] == ["t0", "t1"]
        assert first["cursor"] == "t1"
        rest = api("task.search", cursor="t1", limit=2).data
        assert [t["id"] for t in rest["tasks"]] == ["t2", "t3"]


def test_a_record_larger_than_the_cap_comes_back_alone(api: Api) -> None:
    for promise_id in ("a", "b"):
        api("promise.create", id=promise_id, timeoutAt=FAR, param={"data": "x" * 20_000})
    with override_settings(RESONATE={"MAX_SEARCH_RESPONSE_BYTES": 10_000}):
        first = api("promise.search").data
        assert [p["id"] for p in first["promises"]] == ["a"]
        assert first["cursor"] == "a"
        last = api("promise.search", cursor="a").data
        assert [p["id"] for p in last["promises"]] == ["b"]
        assert "cursor" not in last


@pytest.mark.parametrize("url", ["/api/promises", "/api/schedules"])
def test_a_resource_list_page_stops_at_the_cap_and_its_links_continue(
    api: Api, client: Client, url: str
) -> None:
    ids = big_promises(api, 8)
    # The reserve for two links (each the URL and a cursor), then about three records a page.
    cap = RESPONSE_RESERVE + 2 * (LINK_RESERVE + 100) + 3 * (RECORD_DATA + 1000)
    with override_settings(RESONATE={"MAX_SEARCH_RESPONSE_BYTES": cap}):
        seen: list[str] = []
        link: str | None = url
        page: dict[str, Any] = {}
        while link:
            res = client.get(link)
            assert res.status_code == 200, res.content
            page = res.json()
            assert 1 <= len(page["results"]) <= 4
            assert len(res.content) <= cap
            seen += [r["id"] for r in page["results"]]
            link = page["next"]
        assert seen == ids
        # and backwards from the last page, through the previous links
        back = [r["id"] for r in page["results"]]
        link = page["previous"]
        while link:
            page = client.get(link).json()
            assert 1 <= len(page["results"]) <= 4
            back = [r["id"] for r in page["results"]] + back
            link = page["previous"]
        assert back == ids


# --- listeners --------------------------------------------------------------------------------


def test_listeners_per_promise_at_the_limit_then_409_and_re_registering_stays_200(api: Api) -> None:
    assert api("promise.create", id="ext", timeoutAt=FAR, tags=EXTERNAL).ok
    with override_settings(RESONATE={"MAX_LISTENERS_PER_PROMISE": 3}):
        for i in range(3):
            res = api("promise.register_listener", awaited="ext", address=f"poll://any@g/{i}")
            assert res.status == 200, res.data
        before = snapshot()
        res = api("promise.register_listener", awaited="ext", address="poll://any@g/3")
        refused(res, 409, "MAX_LISTENERS_PER_PROMISE")
        assert snapshot() == before
        res = api("promise.register_listener", awaited="ext", address="poll://any@g/1")
        assert res.status == 200, res.data
        assert snapshot() == before
    assert Listener.objects.filter(awaited_id="ext").count() == 3


# --- cron ---------------------------------------------------------------------------------------


def schedule(cron_expr: str) -> dict[str, Any]:
    return {"id": "s", "cron": cron_expr, "promiseId": "{{.id}}", "promiseTimeout": 1}


def test_a_300_character_cron_is_a_400_and_writes_nothing(api: Api) -> None:
    before = snapshot()
    res = api("schedule.create", **schedule(cron_of_length(300)))
    refused(res, 400, "`$.data.cron`", str(CRON_MAX_LENGTH))
    assert snapshot() == before


def test_a_cron_of_the_column_length_is_stored(api: Api) -> None:
    expr = cron_of_length(CRON_MAX_LENGTH)
    res = api("schedule.create", **schedule(expr))
    assert res.status == 200, res.data
    assert Schedule.objects.get(pk="s").cron == expr
    refused(api("schedule.create", **schedule(cron_of_length(CRON_MAX_LENGTH + 1))), 400, "cron")


def test_a_long_cron_on_the_resource_api_is_a_400_naming_cron(client: Client, db: Any) -> None:
    body = schedule(cron_of_length(CRON_MAX_LENGTH + 1))
    status, field, _ = rest_error(
        client.post("/api/schedules", json.dumps(body), "application/json")
    )
    assert (status, field) == (400, "cron")
    assert not Schedule.objects.exists()
