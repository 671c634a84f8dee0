"""Table tests for the schedule handlers (spec digest §4 S-01 … S-04, §5.6 for firing) and the
brief's decisions: 5- or 6-field cron (seconds first) in UTC, invalid cron → 400, nextRunAt the
first instant strictly after ``now``, schedule.search by promiseTags with a keyset cursor."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db.models import Model

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.engine.steps import schedule_fire
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import Api

SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
MIDNIGHT = 19_675 * DAY  # 2023-11-14T00:00:00Z, a Tuesday

TARGETED = {"resonate:target": "poll://any@default"}
TIMER = {"resonate:timer": "true"}
TEMPLATE = "{{.id}}-{{.timestamp}}"


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every stored row, for "this request wrote nothing" assertions."""
    models: tuple[type[Model], ...] = (Promise, Task, Callback, Listener, Message, Schedule)
    return {
        m.__name__: [dict(row) for row in m._default_manager.order_by("pk").values()]
        for m in models
    }


def names(message: Any, field: str) -> bool:
    pattern = rf"(?<![\w]){re.escape(field)}(?![\w])"
    return isinstance(message, str) and re.search(pattern, message) is not None


def request(schedule_id: str = "s", **overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": schedule_id,
        "cron": "* * * * *",
        "promiseId": TEMPLATE,
        "promiseTimeout": HOUR,
        "promiseParam": {"headers": {"h": "1"}, "data": "eyJmdW5jIjoibmlnaHRseSJ9"},
        "promiseTags": TARGETED,
    }
    data.update(overrides)
    return data


def create(api: Api, schedule_id: str = "s", *, now: int = MIDNIGHT, **overrides: Any) -> Any:
    res = api("schedule.create", now=now, **request(schedule_id, **overrides))
    assert res.status == 200, res.data
    return res.data["schedule"]


# --- S-02 schedule.create -------------------------------------------------------------------


def test_create_stores_the_request_and_get_returns_it(api: Api) -> None:
    record = create(api, "nightly", now=MIDNIGHT + 5)
    assert record == {
        "id": "nightly",
        "cron": "* * * * *",
        "promiseId": TEMPLATE,
        "promiseTimeout": HOUR,
        "promiseParam": {"headers": {"h": "1"}, "data": "eyJmdW5jIjoibmlnaHRseSJ9"},
        "promiseTags": TARGETED,
        "createdAt": MIDNIGHT + 5,
        "nextRunAt": MIDNIGHT + MINUTE,
    }
    assert api("schedule.get", now=MIDNIGHT + 10 * MINUTE, id="nightly").data == {
        "schedule": record
    }


@pytest.mark.parametrize(
    ("cron", "now", "next_run_at"),
    [
        # five fields: minute hour day-of-month month day-of-week (UTC, 0 = Sunday)
        pytest.param("* * * * *", MIDNIGHT, MIDNIGHT + MINUTE, id="every minute, on the minute"),
        pytest.param("* * * * *", MIDNIGHT + 1, MIDNIGHT + MINUTE, id="every minute, +1ms"),
        pytest.param(
            "* * * * *", MIDNIGHT + MINUTE - 1, MIDNIGHT + MINUTE, id="every minute, 1ms before"
        ),
        pytest.param("*/5 * * * *", MIDNIGHT, MIDNIGHT + 5 * MINUTE, id="every 5 minutes"),
        pytest.param("0 * * * *", MIDNIGHT + 1, MIDNIGHT + HOUR, id="hourly"),
        pytest.param("30 0 * * *", MIDNIGHT, MIDNIGHT + 30 * MINUTE, id="00:30 daily"),
        pytest.param("0 0 * * *", MIDNIGHT, MIDNIGHT + DAY, id="daily, at midnight"),
        pytest.param("0 9 * * 1", MIDNIGHT, MIDNIGHT + 6 * DAY + 9 * HOUR, id="Mondays 09:00"),
        pytest.param("0 0 1 * *", MIDNIGHT, MIDNIGHT + 17 * DAY, id="first of the month"),
        # six fields: second first
        pytest.param("* * * * * *", MIDNIGHT, MIDNIGHT + SECOND, id="every second"),
        pytest.param("* * * * * *", MIDNIGHT + 500, MIDNIGHT + SECOND, id="every second, +500ms"),
        pytest.param(
            "*/10 * * * * *", MIDNIGHT + 10 * SECOND, MIDNIGHT + 20 * SECOND, id="every 10s"
        ),
        pytest.param("30 0 * * * *", MIDNIGHT, MIDNIGHT + 30 * SECOND, id="second 30 of minute 0"),
        pytest.param("0 30 * * * *", MIDNIGHT, MIDNIGHT + 30 * MINUTE, id="minute 30, second 0"),
    ],
)
def test_next_run_at_is_the_first_cron_instant_strictly_after_now(
    api: Api, cron: str, now: int, next_run_at: int
) -> None:
    record = create(api, now=now, cron=cron)
    assert record["nextRunAt"] == next_run_at
    assert record["nextRunAt"] > now
    assert record["createdAt"] == now
    assert "lastRunAt" not in record


@pytest.mark.parametrize(
    "again",
    [
        pytest.param({}, id="same request"),
        pytest.param({"cron": "0 0 * * *"}, id="other cron"),
        pytest.param({"promiseId": "other-{{.timestamp}}"}, id="other promiseId"),
        pytest.param({"promiseTimeout": 5}, id="other promiseTimeout"),
        pytest.param({"promiseParam": {"data": "x"}}, id="other promiseParam"),
        pytest.param({"promiseTags": {"k": "v"}}, id="other promiseTags"),
    ],
)
def test_create_is_idempotent_by_id_and_returns_the_original(
    api: Api, again: dict[str, Any]
) -> None:
    original = create(api, now=MIDNIGHT)
    before = snapshot()
    res = api("schedule.create", now=MIDNIGHT + 3 * DAY, **request(**again))
    assert res.status == 200, res.data
    assert res.data == {"schedule": original}
    assert snapshot() == before


def test_create_after_delete_makes_a_new_schedule(api: Api) -> None:
    create(api, now=MIDNIGHT, cron="0 0 * * *")
    assert api("schedule.delete", now=MIDNIGHT + 1, id="s").status == 200
    record = create(api, now=MIDNIGHT + 2 * MINUTE, cron="* * * * *")
    assert (record["cron"], record["createdAt"], record["nextRunAt"]) == (
        "* * * * *",
        MIDNIGHT + 2 * MINUTE,
        MIDNIGHT + 3 * MINUTE,
    )


@pytest.mark.parametrize(
    "cron",
    [
        pytest.param("", id="empty"),
        pytest.param("* * * *", id="four fields"),
        pytest.param("* * * * * * *", id="seven fields"),
        pytest.param("@daily", id="@daily macro"),
        pytest.param("60 * * * *", id="minute 60"),
        pytest.param("* 24 * * *", id="hour 24"),
        pytest.param("* * 32 * *", id="day 32"),
        pytest.param("* * * 13 *", id="month 13"),
        pytest.param("* * * * 8", id="weekday 8"),
        pytest.param("*/0 * * * *", id="step 0"),
        pytest.param("a b c d e", id="words"),
        pytest.param("60 * * * * *", id="six fields, second 60"),
        pytest.param("0 0 30 2 *", id="never fires (30 February)"),
    ],
)
@pytest.mark.parametrize("exists", [False, True], ids=["new id", "existing id"])
def test_an_invalid_cron_is_400_naming_cron_and_writes_nothing(
    api: Api, cron: str, exists: bool
) -> None:
    if exists:
        create(api)
    before = snapshot()
    res = api("schedule.create", now=MIDNIGHT + 1, **request(cron=cron))
    assert res.status == 400, res.data
    assert names(res.data, "cron"), res.data
    assert snapshot() == before


@pytest.mark.parametrize(
    ("tags", "status"),
    [
        pytest.param({**TARGETED, **TIMER}, 400, id="timer + target"),
        pytest.param({"resonate:target": "", **TIMER}, 400, id="timer + empty target"),
        pytest.param(TIMER, 200, id="timer only"),
        pytest.param(TARGETED, 200, id="target only"),
        pytest.param({**TARGETED, "resonate:timer": "false"}, 200, id="target + timer=false"),
        pytest.param({}, 200, id="no tags"),
    ],
)
def test_promise_tags_may_not_make_a_targeted_timer(
    api: Api, tags: dict[str, str], status: int
) -> None:
    before = snapshot()
    res = api("schedule.create", now=MIDNIGHT, **request(promiseTags=tags))
    assert res.status == status, res.data
    if status == 400:
        assert names(res.data, "promiseTags"), res.data
        assert snapshot() == before
    else:
        assert res.data["schedule"]["promiseTags"] == tags


def test_a_targeted_timer_is_400_even_when_the_id_exists(api: Api) -> None:
    """400 outranks "exists → 200 with the original" (spec §4.0: timer+target 400 → exists)."""
    create(api)
    before = snapshot()
    res = api("schedule.create", now=MIDNIGHT + 1, **request(promiseTags={**TARGETED, **TIMER}))
    assert res.status == 400
    assert snapshot() == before


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({}, id="empty"),
        pytest.param({"headers": {}}, id="headers {}"),
        pytest.param({"data": ""}, id='data ""'),
        pytest.param({"headers": {}, "data": ""}, id='headers {} and data ""'),
        pytest.param({"headers": {"ключ": "✓"}, "data": 'a\n"b" \\ é'}, id="unicode and escapes"),
    ],
)
def test_promise_param_round_trips_exactly(api: Api, value: dict[str, Any]) -> None:
    assert create(api, promiseParam=value)["promiseParam"] == value
    got = api("schedule.get", now=MIDNIGHT, id="s").data["schedule"]
    assert got["promiseParam"] == value


LONG_ID = "s" * 1025

BAD_CREATES = [
    pytest.param({"id": None}, "id", id="id null"),
    pytest.param({"id": ""}, "id", id="empty id"),
    pytest.param({"id": LONG_ID}, "id", id="id of 1025"),
    pytest.param({"id": 3}, "id", id="id a number"),
    pytest.param({"cron": None}, "cron", id="cron null"),
    pytest.param({"cron": 5}, "cron", id="cron a number"),
    pytest.param({"promiseId": None}, "promiseId", id="promiseId null"),
    pytest.param({"promiseTimeout": None}, "promiseTimeout", id="promiseTimeout null"),
    pytest.param({"promiseTimeout": -1}, "promiseTimeout", id="promiseTimeout -1"),
    pytest.param({"promiseTimeout": "60"}, "promiseTimeout", id="promiseTimeout str"),
    pytest.param({"promiseTimeout": 1.5}, "promiseTimeout", id="promiseTimeout float"),
    pytest.param({"promiseParam": "x"}, "promiseParam", id="promiseParam str"),
    pytest.param({"promiseParam": {"data": 1}}, "promiseParam.data", id="promiseParam.data int"),
    pytest.param({"promiseTags": ["a"]}, "promiseTags", id="promiseTags list"),
    pytest.param({"promiseTags": {"a": 1}}, "promiseTags", id="promiseTags value int"),
]


@pytest.mark.parametrize(("overrides", "field"), BAD_CREATES)
def test_a_malformed_create_is_400_naming_the_field_and_writes_nothing(
    api: Api, overrides: dict[str, Any], field: str
) -> None:
    create(api, "existing")
    data = {k: v for k, v in request(**overrides).items() if v is not None}
    before = snapshot()
    res = api("schedule.create", now=MIDNIGHT, **data)
    assert res.status == 400, res.data
    assert names(res.data, field), res.data
    assert snapshot() == before


@pytest.mark.parametrize(
    ("kind", "data", "field"),
    [
        pytest.param("schedule.get", {}, "id", id="get: id missing"),
        pytest.param("schedule.get", {"id": ""}, "id", id="get: empty id"),
        pytest.param("schedule.get", {"id": LONG_ID}, "id", id="get: id of 1025"),
        pytest.param("schedule.delete", {}, "id", id="delete: id missing"),
        pytest.param("schedule.delete", {"id": ""}, "id", id="delete: empty id"),
        pytest.param("schedule.delete", {"id": 1}, "id", id="delete: id a number"),
        pytest.param("schedule.search", {"limit": 0}, "limit", id="search: limit 0"),
        pytest.param("schedule.search", {"limit": -5}, "limit", id="search: limit -5"),
        pytest.param("schedule.search", {"limit": 1001}, "limit", id="search: limit 1001"),
        pytest.param("schedule.search", {"limit": "1"}, "limit", id="search: limit str"),
        pytest.param("schedule.search", {"tags": {"a": 1}}, "tags", id="search: tag int"),
        pytest.param("schedule.search", {"cursor": 1}, "cursor", id="search: cursor int"),
    ],
)
def test_malformed_get_delete_search_are_400_and_write_nothing(
    api: Api, kind: str, data: dict[str, Any], field: str
) -> None:
    create(api)
    before = snapshot()
    res = api(kind, now=MIDNIGHT, **data)
    assert res.status == 400, res.data
    assert names(res.data, field), res.data
    assert snapshot() == before


# --- S-01 schedule.get / S-03 schedule.delete ----------------------------------------------


@pytest.mark.parametrize("kind", ["schedule.get", "schedule.delete"])
def test_get_and_delete_of_an_absent_schedule_are_404(api: Api, kind: str) -> None:
    create(api, "present")
    before = snapshot()
    res = api(kind, now=MIDNIGHT, id="absent")
    assert res.status == 404
    assert isinstance(res.data, str)
    assert snapshot() == before


def test_delete_answers_empty_and_the_schedule_is_gone(api: Api) -> None:
    create(api, "a")
    create(api, "b")
    res = api("schedule.delete", now=MIDNIGHT + 1, id="a")
    assert (res.status, res.data) == (200, {})
    assert api("schedule.get", now=MIDNIGHT + 2, id="a").status == 404
    assert api("schedule.delete", now=MIDNIGHT + 3, id="a").status == 404
    assert api("schedule.get", now=MIDNIGHT + 4, id="b").status == 200


def test_delete_leaves_the_occurrences_already_created_alone(api: Api) -> None:
    create(api, "nightly", now=MIDNIGHT, cron="* * * * *", promiseTimeout=HOUR)
    assert schedule_fire(MIDNIGHT + 2 * MINUTE, 100) == 2
    occurrences = [f"nightly-{MIDNIGHT + MINUTE}", f"nightly-{MIDNIGHT + 2 * MINUTE}"]
    assert sorted(Promise.objects.values_list("id", flat=True)) == occurrences
    fired = snapshot()

    assert api("schedule.delete", now=MIDNIGHT + 2 * MINUTE + 1, id="nightly").status == 200

    after = snapshot()
    assert after["Schedule"] == []
    assert {k: v for k, v in after.items() if k != "Schedule"} == {
        k: v for k, v in fired.items() if k != "Schedule"
    }
    for promise_id in occurrences:
        got = api("promise.get", now=MIDNIGHT + 3 * MINUTE, id=promise_id)
        assert (got.status, got.data["promise"]["state"]) == (200, "pending")
        assert api("task.get", now=MIDNIGHT + 3 * MINUTE, id=promise_id).status == 200

    assert schedule_fire(MIDNIGHT + 10 * MINUTE, 100) == 0
    assert Promise.objects.count() == 2


# --- schedule.search --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        pytest.param({"team": "x"}, ["a", "c"], id="one tag"),
        pytest.param({"team": "x", "env": "prod"}, ["c"], id="every tag must match"),
        pytest.param({"team": "x "}, [], id="exact value only"),
        pytest.param({"absent": "x"}, [], id="absent key"),
        pytest.param({"resonate:target": "poll://any@default"}, ["b"], id="resonate:target"),
        pytest.param({}, ["a", "b", "c"], id="empty filter"),
    ],
)
def test_search_filters_on_promise_tags(
    api: Api, tags: dict[str, str], expected: list[str]
) -> None:
    create(api, "a", promiseTags={"team": "x"})
    create(api, "b", promiseTags={"team": "y", **TARGETED})
    create(api, "c", promiseTags={"team": "x", "env": "prod"})
    before = snapshot()
    res = api("schedule.search", now=MIDNIGHT, tags=tags)
    assert res.status == 200, res.data
    assert [s["id"] for s in res.data["schedules"]] == expected
    for record in res.data["schedules"]:
        assert record == api("schedule.get", now=MIDNIGHT, id=record["id"]).data["schedule"]
    assert snapshot() == before


@pytest.mark.parametrize(
    ("count", "limit", "pages"),
    [
        pytest.param(25, 10, [10, 10, 5], id="25 by 10"),
        pytest.param(20, 10, [10, 10], id="20 by 10"),
        pytest.param(2, 1, [1, 1], id="2 by 1"),
        pytest.param(0, 10, [0], id="none"),
        pytest.param(3, 1000, [3], id="limit 1000"),
    ],
)
def test_search_pages_by_id_with_a_cursor_absent_on_the_last_page(
    api: Api, count: int, limit: int, pages: list[int]
) -> None:
    ids = [f"s{i:02d}" for i in range(count)]
    for schedule_id in reversed(ids):
        create(api, schedule_id)
    seen: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    for page in range(len(pages)):
        data: dict[str, Any] = {"limit": limit}
        if cursor is not None:
            data["cursor"] = cursor
        res = api("schedule.search", now=MIDNIGHT, **data)
        assert res.status == 200, res.data
        found = [s["id"] for s in res.data["schedules"]]
        seen += found
        sizes.append(len(found))
        cursor = res.data.get("cursor")
        if page < len(pages) - 1:
            assert cursor == found[-1]
    assert cursor is None
    assert sizes == pages
    assert seen == ids
