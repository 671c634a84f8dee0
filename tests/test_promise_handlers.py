"""Table tests for the promise handlers (spec digest §4 P-01 … P-05 and promise.search).

Every test picks its own ``now``. "Nothing was written" is checked by comparing a snapshot of
every stored table before and after the request, so reads, refusals and absorbed settles are
held to the read discipline -p (C8, §2.5, §3).
"""

from __future__ import annotations

import random
import re
from typing import Any

import pytest
from django.db.models import Model
from django.test import override_settings

from outbox.models import Message
from promises.models import Callback, Listener, Promise
from resonate_project.engine.steps import promise_timeouts, retry_dispatch, run_due
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import FAR, Api

T0 = 10_000  # when the fixtures of a test are created
RETRY_TIMEOUT_MS = 5_000  # the server's default redispatch cadence (brief, spec §1.6)

TARGET = "poll://any@workers"
TARGETED = {"resonate:target": TARGET}
EXTERNAL = {"resonate:external": "true"}
TIMER = {"resonate:timer": "true"}
GLOBAL = {"resonate:scope": "global"}  # external by the brief's decision (TypeScript SDK)
INTERNAL: dict[str, str] = {}
LOCAL = {"resonate:scope": "local"}


# --- helpers ------------------------------------------------------------------------------------


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every stored row, for "this request wrote nothing" assertions."""
    models: tuple[type[Model], ...] = (Promise, Task, Callback, Listener, Message, Schedule)
    return {
        m.__name__: [dict(row) for row in m._default_manager.order_by("pk").values()]
        for m in models
    }


def names(message: Any, field: str) -> bool:
    """Whether a 400 message names ``field`` (as a word, so "id" does not match "invalid")."""
    pattern = rf"(?<![\w]){re.escape(field)}(?![\w])"
    return isinstance(message, str) and re.search(pattern, message) is not None


def create(
    api: Api,
    promise_id: str,
    *,
    now: int = T0,
    timeout_at: int = FAR,
    tags: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    res = api(
        "promise.create", now=now, id=promise_id, timeoutAt=timeout_at, tags=tags or {}, **extra
    )
    assert res.status == 200, res.data
    record: dict[str, Any] = res.data["promise"]
    return record


def settle(api: Api, promise_id: str, state: str = "resolved", *, now: int, **extra: Any) -> Any:
    res = api("promise.settle", now=now, id=promise_id, state=state, **extra)
    assert res.status == 200, res.data
    return res.data["promise"]


def stored(promise_id: str) -> Promise:
    return Promise.objects.get(id=promise_id)


def task_of(api: Api, promise_id: str, now: int) -> dict[str, Any]:
    res = api("task.get", now=now, id=promise_id)
    assert res.status == 200, res.data
    task: dict[str, Any] = res.data["task"]
    return task


def callbacks() -> set[tuple[str, str]]:
    return set(Callback.objects.values_list("awaited_id", "awaiter_id"))


def listeners() -> set[tuple[str, str]]:
    return set(Listener.objects.values_list("awaited_id", "address"))


def executes() -> dict[str, tuple[int | None, str, int]]:
    """Outstanding execute messages: task id → (version, address, written at)."""
    rows = Message.objects.filter(kind="execute").values_list(
        "task_id", "version", "address", "created_at"
    )
    return {str(task_id): (version, address, at) for task_id, version, address, at in rows}


def random_text(n: int, alphabet: str, seed: int = 7) -> str:
    """Text that does not compress (a deterministic stand-in for real-world addresses and ids)."""
    rnd = random.Random(seed)
    return "".join(rnd.choice(alphabet) for _ in range(n))


def callback_action(awaited: str, awaiter: str) -> dict[str, Any]:
    return {
        "kind": "promise.register_callback",
        "head": {},
        "data": {"awaited": awaited, "awaiter": awaiter},
    }


# --- P-01 promise.get -----------------------------------------------------------------------------


def test_get_of_an_absent_promise_is_404_and_writes_nothing(api: Api) -> None:
    create(api, "present")
    before = snapshot()
    res = api("promise.get", now=T0, id="absent")
    assert res.status == 404
    assert isinstance(res.data, str)
    assert snapshot() == before


def test_get_returns_the_record_create_returned(api: Api) -> None:
    created = create(
        api,
        "p",
        timeout_at=60_000,
        tags={"k": "v", **EXTERNAL},
        param={"headers": {"h": "1"}, "data": "abc"},
    )
    assert created == {
        "id": "p",
        "state": "pending",
        "param": {"headers": {"h": "1"}, "data": "abc"},
        "value": {},
        "tags": {"k": "v", **EXTERNAL},
        "timeoutAt": 60_000,
        "createdAt": T0,
    }
    assert api("promise.get", now=T0 + 1, id="p").data == {"promise": created}


# --- P-02 promise.create: born live, born dead ----------------------------------------------------


@pytest.mark.parametrize(
    "tags",
    [
        pytest.param(INTERNAL, id="untagged"),
        pytest.param(EXTERNAL, id="external"),
        pytest.param(TIMER, id="timer"),
        pytest.param(TARGETED, id="targeted"),
        pytest.param({"resonate:target": ""}, id="empty-target"),
    ],
)
@pytest.mark.parametrize("timeout_at", [T0 + 1, FAR], ids=["deadline-now+1", "far-deadline"])
def test_a_promise_with_its_deadline_ahead_is_born_pending(
    api: Api, tags: dict[str, str], timeout_at: int
) -> None:
    record = create(api, "p", now=T0, timeout_at=timeout_at, tags=tags)
    assert record["state"] == "pending"
    assert record["createdAt"] == T0
    assert "settledAt" not in record
    assert record["value"] == {}
    row = stored("p")
    assert (row.state, row.settled_at) == ("pending", None)


@pytest.mark.parametrize(
    ("tags", "timeout_at", "state"),
    [
        pytest.param(INTERNAL, T0, "rejected_timedout", id="deadline == now"),
        pytest.param(INTERNAL, T0 - 1, "rejected_timedout", id="deadline < now"),
        pytest.param(INTERNAL, 0, "rejected_timedout", id="deadline 0"),
        pytest.param(EXTERNAL, T0, "rejected_timedout", id="external, deadline == now"),
        pytest.param(TARGETED, T0, "rejected_timedout", id="targeted, deadline == now"),
        pytest.param(TIMER, T0, "resolved", id="timer, deadline == now"),
        pytest.param(TIMER, T0 - 5_000, "resolved", id="timer, deadline < now"),
        pytest.param(
            {"resonate:timer": "TRUE"}, T0, "rejected_timedout", id="timer=TRUE is no timer"
        ),
    ],
)
def test_a_promise_past_its_deadline_is_born_settled_at_the_deadline(
    api: Api, tags: dict[str, str], timeout_at: int, state: str
) -> None:
    record = create(api, "p", now=T0, timeout_at=timeout_at, tags=tags)
    assert record["state"] == state
    assert record["createdAt"] == timeout_at
    assert record["settledAt"] == timeout_at
    assert record["value"] == {}
    row = stored("p")
    assert (row.state, row.created_at, row.settled_at) == (state, timeout_at, timeout_at)
    assert api("promise.get", now=T0, id="p").data == {"promise": record}


def test_a_targeted_promise_born_live_gets_a_pending_task_dispatched_at_once(api: Api) -> None:
    create(api, "job", now=T0, tags=TARGETED)
    assert task_of(api, "job", T0) == {"id": "job", "state": "pending", "version": 0, "resumes": 0}
    assert executes() == {"job": (0, TARGET, T0)}
    assert Task.objects.get(pk="job").retry_at == T0 + RETRY_TIMEOUT_MS


@pytest.mark.parametrize(
    ("tags", "state"),
    [
        pytest.param(TARGETED, "rejected_timedout", id="targeted"),
        pytest.param({**TARGETED, **TIMER}, "resolved", id="targeted timer"),
    ],
)
def test_a_targeted_promise_born_dead_gets_a_fulfilled_task_and_no_dispatch(
    api: Api, tags: dict[str, str], state: str
) -> None:
    assert create(api, "job", now=T0, timeout_at=T0, tags=tags)["state"] == state
    assert task_of(api, "job", T0) == {
        "id": "job",
        "state": "fulfilled",
        "version": 0,
        "resumes": 0,
    }
    assert Task.objects.get(pk="job").state == "fulfilled"
    run_due(T0 + 60_000, 100)
    assert executes() == {}


def test_an_untargeted_promise_has_no_task(api: Api) -> None:
    create(api, "p", tags=EXTERNAL)
    assert api("task.get", now=T0, id="p").status == 404
    assert not Task.objects.exists()


def test_a_targeted_timer_is_accepted_never_dispatched_and_resolved_at_its_deadline(
    api: Api,
) -> None:
    """Brief decision (spec HEAD says 400): the Python SDK's ctx.sleep sends timer + target."""
    deadline = T0 + 30_000
    record = create(api, "sleep", now=T0, timeout_at=deadline, tags={**TARGETED, **TIMER})
    assert record["state"] == "pending"
    assert task_of(api, "sleep", T0) == {
        "id": "sleep",
        "state": "pending",
        "version": 0,
        "resumes": 0,
    }
    assert Task.objects.get(pk="sleep").retry_at == deadline
    assert executes() == {}

    run_due(deadline - 1, 100)
    assert executes() == {}
    assert stored("sleep").state == "pending"

    run_due(deadline, 100)
    got = api("promise.get", now=deadline, id="sleep").data["promise"]
    assert (got["state"], got["settledAt"], got["value"]) == ("resolved", deadline, {})
    assert stored("sleep").state == "resolved"
    assert Task.objects.get(pk="sleep").state == "fulfilled"
    assert executes() == {}


# --- P-02 resonate:delay --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("delay", "first_dispatch"),
    [
        pytest.param(T0 + 3_000, T0 + 3_000, id="delay in the future"),
        pytest.param(T0, T0, id="delay == now"),
        pytest.param(T0 - 3_000, T0, id="delay in the past"),
        pytest.param(0, T0, id="delay 0"),
    ],
)
def test_delay_makes_the_first_dispatch_due_at_max_delay_now(
    api: Api, delay: int, first_dispatch: int
) -> None:
    create(api, "job", now=T0, tags={**TARGETED, "resonate:delay": str(delay)})
    if first_dispatch > T0:
        assert Task.objects.get(pk="job").retry_at == first_dispatch
        assert executes() == {}
        retry_dispatch(first_dispatch - 1, 100)
        assert executes() == {}
        assert task_of(api, "job", first_dispatch - 1)["state"] == "pending"
        retry_dispatch(first_dispatch, 100)
    assert executes() == {"job": (0, TARGET, first_dispatch)}
    assert Task.objects.get(pk="job").retry_at == first_dispatch + RETRY_TIMEOUT_MS


def test_a_delay_at_or_past_the_deadline_is_never_dispatched(api: Api) -> None:
    deadline = T0 + 5_000
    create(
        api, "job", now=T0, timeout_at=deadline, tags={**TARGETED, "resonate:delay": str(deadline)}
    )
    assert executes() == {}
    run_due(deadline, 100)
    assert executes() == {}
    assert (
        api("promise.get", now=deadline, id="job").data["promise"]["state"] == "rejected_timedout"
    )
    assert task_of(api, "job", deadline)["state"] == "fulfilled"


# --- P-02 idempotent re-create --------------------------------------------------------------------


ORIGINAL: dict[str, Any] = {
    "timeoutAt": 60_000,
    "tags": {"k": "v", **EXTERNAL},
    "param": {"headers": {"h": "1"}, "data": "first"},
}


@pytest.mark.parametrize(
    "again",
    [
        pytest.param({}, id="same arguments"),
        pytest.param({"timeoutAt": 90_000}, id="other deadline"),
        pytest.param({"timeoutAt": T0}, id="deadline that would be born dead"),
        pytest.param({"param": {"data": "second"}}, id="other param"),
        pytest.param({"tags": {"k": "w"}}, id="other tags"),
        pytest.param({"tags": TARGETED}, id="now targeted"),
        pytest.param({"tags": TIMER}, id="now a timer"),
    ],
)
def test_recreate_returns_the_original_and_writes_nothing(api: Api, again: dict[str, Any]) -> None:
    res = api("promise.create", now=T0, id="p", **ORIGINAL)
    assert res.status == 200
    original = res.data["promise"]
    before = snapshot()
    res = api("promise.create", now=T0 + 1_000, **{"id": "p", **ORIGINAL, **again})
    assert res.status == 200
    assert res.data == {"promise": original}
    assert snapshot() == before


@pytest.mark.parametrize(
    ("tags", "state"),
    [
        pytest.param(EXTERNAL, "rejected_timedout", id="external"),
        pytest.param(TIMER, "resolved", id="timer"),
        pytest.param(TARGETED, "rejected_timedout", id="targeted"),
    ],
)
@pytest.mark.parametrize("late", [0, 1], ids=["at the deadline", "after the deadline"])
def test_recreate_after_the_deadline_returns_the_original_projected(
    api: Api, tags: dict[str, str], state: str, late: int
) -> None:
    deadline = 40_000
    original = create(api, "p", now=T0, timeout_at=deadline, tags=tags)
    before = snapshot()
    res = api("promise.create", now=deadline + late, id="p", timeoutAt=FAR, tags=tags)
    assert res.status == 200
    assert res.data == {"promise": {**original, "state": state, "settledAt": deadline}}
    assert snapshot() == before


# --- P-03 promise.settle --------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["resolved", "rejected", "rejected_canceled"])
@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="no value"),
        pytest.param({}, id="empty value"),
        pytest.param({"headers": {"h": "v"}, "data": "eyJvayI6IHRydWV9"}, id="headers and data"),
    ],
)
def test_settling_a_live_promise_stores_the_verdict_at_now(
    api: Api, state: str, value: dict[str, Any] | None
) -> None:
    original = create(api, "p", now=T0, timeout_at=60_000, tags=EXTERNAL)
    extra = {} if value is None else {"value": value}
    record = settle(api, "p", state, now=T0 + 500, **extra)
    assert record == {**original, "state": state, "value": value or {}, "settledAt": T0 + 500}
    assert api("promise.get", now=T0 + 600, id="p").data == {"promise": record}
    row = stored("p")
    assert (row.state, row.settled_at) == (state, T0 + 500)


def test_settling_a_targeted_promise_fulfils_its_task_in_the_same_write(api: Api) -> None:
    create(api, "job", now=T0, tags=TARGETED)
    settle(api, "job", "resolved", now=T0 + 1)
    task = Task.objects.get(pk="job")
    assert (task.state, task.version, task.retry_at, task.resumes) == ("fulfilled", 0, None, [])
    assert task_of(api, "job", T0 + 1) == {
        "id": "job",
        "state": "fulfilled",
        "version": 0,
        "resumes": 0,
    }


def test_settle_one_millisecond_before_the_deadline_still_wins(api: Api) -> None:
    create(api, "p", now=T0, timeout_at=T0 + 100, tags=EXTERNAL)
    assert settle(api, "p", "rejected", now=T0 + 99)["state"] == "rejected"


def test_settle_of_an_absent_promise_is_404_and_writes_nothing(api: Api) -> None:
    create(api, "present")
    before = snapshot()
    res = api("promise.settle", now=T0, id="absent", state="resolved")
    assert res.status == 404
    assert snapshot() == before


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param("resolved", "resolved", id="resolved then resolved"),
        pytest.param("resolved", "rejected", id="resolved then rejected"),
        pytest.param("rejected", "resolved", id="rejected then resolved"),
        pytest.param("rejected_canceled", "resolved", id="canceled then resolved"),
    ],
)
def test_the_first_verdict_wins_and_a_second_settle_writes_nothing(
    api: Api, first: str, second: str
) -> None:
    create(api, "p", now=T0, tags=TARGETED)
    won = settle(api, "p", first, now=T0 + 1, value={"data": "first"})
    before = snapshot()
    res = api("promise.settle", now=T0 + 2, id="p", state=second, value={"data": "second"})
    assert res.status == 200
    assert res.data == {"promise": won}
    assert snapshot() == before


@pytest.mark.parametrize(
    ("tags", "state"),
    [
        pytest.param(EXTERNAL, "rejected_timedout", id="external"),
        pytest.param(INTERNAL, "rejected_timedout", id="internal"),
        pytest.param(TARGETED, "rejected_timedout", id="targeted"),
        pytest.param(TIMER, "resolved", id="timer"),
    ],
)
@pytest.mark.parametrize("late", [0, 1, 10_000], ids=["now == deadline", "1ms late", "10s late"])
def test_a_late_settle_returns_the_deadline_verdict_with_200_and_writes_nothing(
    api: Api, tags: dict[str, str], state: str, late: int
) -> None:
    deadline = 30_000
    original = create(api, "p", now=T0, timeout_at=deadline, tags=tags)
    before = snapshot()
    res = api("promise.settle", now=deadline + late, id="p", state="resolved", value={"data": "x"})
    assert res.status == 200
    assert res.data == {"promise": {**original, "state": state, "settledAt": deadline, "value": {}}}
    assert snapshot() == before


# --- projection on every response (C8) ---------------------------------------------------------


def _project_get(api: Api, now: int) -> Any:
    return api("promise.get", now=now, id="dead")


def _project_create(api: Api, now: int) -> Any:
    return api("promise.create", now=now, id="dead", timeoutAt=FAR)


def _project_settle(api: Api, now: int) -> Any:
    return api("promise.settle", now=now, id="dead", state="rejected")


def _project_callback(api: Api, now: int) -> Any:
    return api("promise.register_callback", now=now, awaited="dead", awaiter="waiter")


def _project_listener(api: Api, now: int) -> Any:
    return api("promise.register_listener", now=now, awaited="dead", address="http://l/x")


def _project_search(api: Api, now: int) -> Any:
    res = api("promise.search", now=now)
    if res.status == 200:
        hits = [p for p in res.data["promises"] if p["id"] == "dead"]
        res.data = {"promise": hits[0] if hits else None}
    return res


@pytest.mark.parametrize(
    "call",
    [
        _project_get,
        _project_create,
        _project_settle,
        _project_callback,
        _project_listener,
        _project_search,
    ],
    ids=["get", "create", "settle", "register_callback", "register_listener", "search"],
)
@pytest.mark.parametrize(
    ("tags", "state"),
    [
        pytest.param(EXTERNAL, "rejected_timedout", id="external"),
        pytest.param(TIMER, "resolved", id="timer"),
        pytest.param(TARGETED, "rejected_timedout", id="targeted"),
    ],
)
@pytest.mark.parametrize("late", [0, 7_000], ids=["at the deadline", "after the deadline"])
def test_every_response_projects_a_dead_pending_promise_and_writes_nothing(
    api: Api, call: Any, tags: dict[str, str], state: str, late: int
) -> None:
    deadline = 25_000
    original = create(api, "dead", now=T0, timeout_at=deadline, tags=tags)
    create(api, "waiter", now=T0, tags=TARGETED)
    before = snapshot()
    res = call(api, deadline + late)
    assert res.status == 200, res.data
    assert res.data["promise"] == {**original, "state": state, "settledAt": deadline, "value": {}}
    assert snapshot() == before
    assert stored("dead").state == "pending"


def test_a_promise_reads_pending_one_millisecond_before_its_deadline(api: Api) -> None:
    original = create(api, "p", now=T0, timeout_at=T0 + 1_000)
    assert api("promise.get", now=T0 + 999, id="p").data == {"promise": original}


# --- P-04 promise.register_callback ---------------------------------------------------------------


# Each row: the promises that exist (id → tags), the request, the status. The rows walk the
# spec's order: self 400 → awaited absent 404 → awaiter absent 422 → awaiter untargeted 422 →
# awaited internal 422 → 200; where two defects meet, the earlier one must answer.
CALLBACK_PRECEDENCE = [
    pytest.param({}, "a", "a", 400, id="self-await of an absent promise: 400 before 404"),
    pytest.param({"a": TARGETED}, "a", "a", 400, id="self-await of a targeted promise"),
    pytest.param({}, "a", "w", 404, id="both absent: awaited 404 before awaiter 422"),
    pytest.param({"w": EXTERNAL}, "a", "w", 404, id="awaited absent, awaiter untargeted: 404"),
    pytest.param({"w": TARGETED}, "a", "w", 404, id="awaited absent, awaiter fine: 404"),
    pytest.param({"a": INTERNAL}, "a", "w", 422, id="awaiter absent, awaited internal: 422"),
    pytest.param({"a": EXTERNAL}, "a", "w", 422, id="awaiter absent"),
    pytest.param(
        {"a": INTERNAL, "w": EXTERNAL}, "a", "w", 422, id="awaiter untargeted, awaited internal"
    ),
    pytest.param(
        {"a": EXTERNAL, "w": EXTERNAL}, "a", "w", 422, id="awaiter external but untargeted"
    ),
    pytest.param({"a": EXTERNAL, "w": TIMER}, "a", "w", 422, id="awaiter a timer but untargeted"),
    pytest.param({"a": EXTERNAL, "w": INTERNAL}, "a", "w", 422, id="awaiter untagged"),
    pytest.param({"a": INTERNAL, "w": TARGETED}, "a", "w", 422, id="awaited untagged: internal"),
    pytest.param({"a": LOCAL, "w": TARGETED}, "a", "w", 422, id="awaited scope=local: internal"),
    pytest.param(
        {"a": {"resonate:external": "false"}, "w": TARGETED},
        "a",
        "w",
        422,
        id="awaited external=false",
    ),
    pytest.param(
        {"a": {"resonate:timer": "yes"}, "w": TARGETED}, "a", "w", 422, id="awaited timer=yes"
    ),
    pytest.param({"a": EXTERNAL, "w": TARGETED}, "a", "w", 200, id="awaited external=true"),
    pytest.param({"a": TARGETED, "w": TARGETED}, "a", "w", 200, id="awaited targeted"),
    pytest.param({"a": TIMER, "w": TARGETED}, "a", "w", 200, id="awaited timer"),
    pytest.param({"a": GLOBAL, "w": TARGETED}, "a", "w", 200, id="awaited scope=global (decision)"),
    pytest.param(
        {"a": EXTERNAL, "w": {"resonate:target": ""}}, "a", "w", 200, id="awaiter target ''"
    ),
]


@pytest.mark.parametrize(("existing", "awaited", "awaiter", "status"), CALLBACK_PRECEDENCE)
def test_register_callback_refusals_in_spec_order(
    api: Api, existing: dict[str, dict[str, str]], awaited: str, awaiter: str, status: int
) -> None:
    for promise_id, tags in existing.items():
        create(api, promise_id, now=T0, tags=tags)
    before = snapshot()
    res = api("promise.register_callback", now=T0 + 1, awaited=awaited, awaiter=awaiter)
    assert res.status == status, res.data
    if status == 200:
        assert res.data == {"promise": api("promise.get", now=T0 + 1, id=awaited).data["promise"]}
        assert callbacks() == {(awaited, awaiter)}
    else:
        assert isinstance(res.data, str)
        assert snapshot() == before
    if status == 400:
        assert names(res.data, "awaited") or names(res.data, "awaiter")


# Each row: the awaited / awaiter deadline and settlement, and whether a callback is recorded
# when registering at NOW_CB (C11: only while both are live; the boundary now == deadline is dead).
NOW_CB = 50_000


@pytest.mark.parametrize(
    ("awaited", "awaiter", "recorded", "awaited_state"),
    [
        pytest.param({}, {}, True, "pending", id="both live"),
        pytest.param(
            {"deadline": NOW_CB + 1},
            {"deadline": NOW_CB + 1},
            True,
            "pending",
            id="both live by 1ms",
        ),
        pytest.param({"settle": "resolved"}, {}, False, "resolved", id="awaited resolved"),
        pytest.param(
            {"settle": "rejected_canceled"}, {}, False, "rejected_canceled", id="awaited canceled"
        ),
        pytest.param(
            {"deadline": NOW_CB}, {}, False, "rejected_timedout", id="awaited dead at boundary"
        ),
        pytest.param({"deadline": NOW_CB - 1}, {}, False, "rejected_timedout", id="awaited dead"),
        pytest.param(
            {"deadline": NOW_CB, "tags": TIMER}, {}, False, "resolved", id="awaited timer dead"
        ),
        pytest.param({}, {"settle": "resolved"}, False, "pending", id="awaiter settled"),
        pytest.param({}, {"deadline": NOW_CB}, False, "pending", id="awaiter dead at boundary"),
        pytest.param({}, {"deadline": NOW_CB - 1}, False, "pending", id="awaiter dead"),
    ],
)
def test_register_callback_records_only_while_both_promises_are_live(
    api: Api, awaited: dict[str, Any], awaiter: dict[str, Any], recorded: bool, awaited_state: str
) -> None:
    create(
        api,
        "a",
        now=T0,
        timeout_at=awaited.get("deadline", FAR),
        tags=awaited.get("tags", EXTERNAL),
    )
    create(api, "w", now=T0, timeout_at=awaiter.get("deadline", FAR), tags=TARGETED)
    for promise_id, spec in (("a", awaited), ("w", awaiter)):
        if "settle" in spec:
            settle(api, promise_id, spec["settle"], now=T0 + 1)
    rows_before = snapshot()
    res = api("promise.register_callback", now=NOW_CB, awaited="a", awaiter="w")
    assert res.status == 200
    assert res.data == {"promise": api("promise.get", now=NOW_CB, id="a").data["promise"]}
    assert res.data["promise"]["state"] == awaited_state
    assert callbacks() == ({("a", "w")} if recorded else set())
    if not recorded:
        assert snapshot() == rows_before


def test_register_callback_twice_records_one_callback_and_suspends_nothing(api: Api) -> None:
    create(api, "a", tags=EXTERNAL)
    create(api, "w", tags=TARGETED)
    first = api("promise.register_callback", now=T0 + 1, awaited="a", awaiter="w")
    second = api("promise.register_callback", now=T0 + 2, awaited="a", awaiter="w")
    assert (first.status, second.status) == (200, 200)
    assert first.data == second.data
    assert Callback.objects.count() == 1
    assert task_of(api, "w", T0 + 2)["state"] == "pending"


# --- P-05 promise.register_listener ---------------------------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "http://host/path",
        "https://host:8443/cb?x=1",
        "poll://any@default",
        "poll://uni@group/pid-1",
    ],
)
def test_deliverable_addresses_are_accepted(api: Api, address: str) -> None:
    assert api("promise.register_listener", now=T0, awaited="absent", address=address).status == 404
    create(api, "p", tags=EXTERNAL)
    res = api("promise.register_listener", now=T0, awaited="p", address=address)
    assert res.status == 200
    assert listeners() == {("p", address)}


@pytest.mark.parametrize(
    "address",
    [
        pytest.param("poll://default", id="poll without @"),
        pytest.param("ftp://user@host", id="ftp"),
        pytest.param("", id="empty"),
        pytest.param("any@default", id="no scheme"),
        pytest.param("http:/host", id="http:/ (one slash)"),
        pytest.param("poll:/any@default", id="poll:/ (one slash)"),
        pytest.param("ws://host@x", id="ws"),
        pytest.param("poll://x@y", id="poll with neither uni nor any"),
        pytest.param("poll://uni@group", id="poll://uni without an id"),
    ],
)
@pytest.mark.parametrize(
    "awaited_exists", [False, True], ids=["awaited absent", "awaited external"]
)
def test_undeliverable_addresses_are_400_before_anything_is_read(
    api: Api, address: str, awaited_exists: bool
) -> None:
    if awaited_exists:
        create(api, "p", tags=EXTERNAL)
    before = snapshot()
    res = api("promise.register_listener", now=T0, awaited="p", address=address)
    assert res.status == 400
    assert names(res.data, "address")
    assert snapshot() == before


@pytest.mark.parametrize(
    ("tags", "status"),
    [
        pytest.param(None, 404, id="absent"),
        pytest.param(INTERNAL, 422, id="untagged: internal"),
        pytest.param(LOCAL, 422, id="scope=local: internal"),
        pytest.param({"resonate:external": "false"}, 422, id="external=false: internal"),
        pytest.param(EXTERNAL, 200, id="external=true"),
        pytest.param(TARGETED, 200, id="targeted"),
        pytest.param(TIMER, 200, id="timer"),
        pytest.param(GLOBAL, 200, id="scope=global (decision)"),
    ],
)
def test_register_listener_needs_an_existing_external_promise(
    api: Api, tags: dict[str, str] | None, status: int
) -> None:
    if tags is not None:
        create(api, "p", tags=tags)
    before = snapshot()
    res = api("promise.register_listener", now=T0, awaited="p", address="poll://uni@g/pid")
    assert res.status == status
    if status == 200:
        assert listeners() == {("p", "poll://uni@g/pid")}
    else:
        assert snapshot() == before


NOW_L = 50_000


@pytest.mark.parametrize(
    ("deadline", "settled", "recorded", "state"),
    [
        pytest.param(FAR, None, True, "pending", id="live"),
        pytest.param(NOW_L + 1, None, True, "pending", id="live by 1ms"),
        pytest.param(FAR, "resolved", False, "resolved", id="settled"),
        pytest.param(NOW_L, None, False, "rejected_timedout", id="dead at boundary"),
        pytest.param(NOW_L - 1, None, False, "rejected_timedout", id="dead"),
    ],
)
def test_register_listener_records_only_while_the_promise_is_live(
    api: Api, deadline: int, settled: str | None, recorded: bool, state: str
) -> None:
    create(api, "p", now=T0, timeout_at=deadline, tags=EXTERNAL)
    if settled:
        settle(api, "p", settled, now=T0 + 1)
    before = snapshot()
    res = api("promise.register_listener", now=NOW_L, awaited="p", address="http://l/1")
    assert res.status == 200
    assert res.data == {"promise": api("promise.get", now=NOW_L, id="p").data["promise"]}
    assert res.data["promise"]["state"] == state
    assert listeners() == ({("p", "http://l/1")} if recorded else set())
    if not recorded:
        assert snapshot() == before
    assert not Message.objects.filter(kind="unblock").exists()


def test_register_listener_deduplicates_by_address(api: Api) -> None:
    create(api, "p", tags=EXTERNAL)
    for address in ["http://a/1", "http://a/1", "poll://uni@g/p", "http://a/1"]:
        assert api("promise.register_listener", now=T0, awaited="p", address=address).status == 200
    assert listeners() == {("p", "http://a/1"), ("p", "poll://uni@g/p")}


def test_a_listener_address_within_the_accepted_length_is_stored(api: Api) -> None:
    """Addresses up to 1024 bytes register and unblock (they are indexed, with the promise id)."""
    address = "https://" + random_text(1_016, "abcdefghijklmnopqrstuvwxyz0123456789/")
    create(api, "p", tags=EXTERNAL)
    assert api("promise.register_listener", now=T0, awaited="p", address=address).status == 200
    settle(api, "p", now=T0 + 1)
    assert Message.objects.filter(kind="unblock", address=address).count() == 1


def test_a_listener_address_over_1024_bytes_is_400_naming_the_address(api: Api) -> None:
    address = "https://" + "é" * 600
    create(api, "p", tags=EXTERNAL)
    before = snapshot()
    res = api("promise.register_listener", now=T0, awaited="p", address=address)
    assert res.status == 400
    assert "address" in res.data
    assert snapshot() == before


# --- inline effects of a settlement ---------------------------------------------------------------


ADDRESSES = ["http://a.example/hook", "https://b.example/hook", "poll://uni@group/pid"]


def _settle_by_client(api: Api, now: int) -> None:
    settle(api, "p", "rejected", now=now, value={"headers": {"e": "1"}, "data": "boom"})


def _settle_by_deadline(api: Api, now: int) -> None:
    promise_timeouts(now, 100)


@pytest.mark.parametrize(
    ("how", "at"),
    [
        pytest.param(_settle_by_client, T0 + 500, id="client settle"),
        pytest.param(_settle_by_deadline, 40_000, id="deadline (timeout step)"),
    ],
)
def test_a_settlement_writes_one_unblock_per_listener_carrying_the_settled_record(
    api: Api, how: Any, at: int
) -> None:
    create(api, "p", now=T0, timeout_at=40_000, tags=EXTERNAL)
    create(api, "other", now=T0, tags=EXTERNAL)
    for address in ADDRESSES:
        api("promise.register_listener", now=T0, awaited="p", address=address)
    api("promise.register_listener", now=T0, awaited="other", address=ADDRESSES[0])

    how(api, at)

    record = api("promise.get", now=at, id="p").data["promise"]
    assert record["state"] != "pending"
    unblocks = {m.key: m for m in Message.objects.filter(kind="unblock")}
    assert set(unblocks) == {f"p:notify:{address}" for address in ADDRESSES}
    for address in ADDRESSES:
        message = unblocks[f"p:notify:{address}"]
        assert message.address == address
        assert message.promise == record
    assert listeners() == {("other", ADDRESSES[0])}


def _suspended_workflow(api: Api, awaited: str, deadline: int = FAR) -> None:
    """``wf`` (targeted) acquired at version 1 and suspended on ``awaited``."""
    create(api, "wf", now=T0, timeout_at=deadline, tags=TARGETED)
    assert api("task.acquire", now=T0, id="wf", version=0, pid="worker", ttl=60_000).status == 200
    res = api(
        "task.suspend", now=T0 + 1, id="wf", version=1, actions=[callback_action(awaited, "wf")]
    )
    assert res.status == 200, res.data
    assert task_of(api, "wf", T0 + 1)["state"] == "suspended"


def test_settling_the_awaited_wakes_a_suspended_awaiter(api: Api) -> None:
    create(api, "child", now=T0, tags=EXTERNAL)
    _suspended_workflow(api, "child")
    at = T0 + 2_000
    settle(api, "child", now=at)
    assert task_of(api, "wf", at) == {"id": "wf", "state": "pending", "version": 1, "resumes": 1}
    task = Task.objects.get(pk="wf")
    assert task.resumes == ["child"]
    assert task.retry_at == at + RETRY_TIMEOUT_MS
    assert executes()["wf"] == (1, TARGET, at)
    assert callbacks() == set()


def test_a_callback_registered_by_register_callback_wakes_the_awaiter_too(api: Api) -> None:
    create(api, "child", now=T0, tags=EXTERNAL)
    create(api, "wf", now=T0, tags=TARGETED)
    assert api("promise.register_callback", now=T0, awaited="child", awaiter="wf").status == 200
    api("task.acquire", now=T0, id="wf", version=0, pid="worker", ttl=60_000)
    api("task.suspend", now=T0 + 1, id="wf", version=1, actions=[callback_action("child", "wf")])
    assert callbacks() == {("child", "wf")}
    settle(api, "child", now=T0 + 5)
    assert task_of(api, "wf", T0 + 5) == {
        "id": "wf",
        "state": "pending",
        "version": 1,
        "resumes": 1,
    }
    assert executes()["wf"] == (1, TARGET, T0 + 5)


def test_settling_the_awaited_buffers_a_resume_on_an_acquired_awaiter(api: Api) -> None:
    create(api, "child", now=T0, tags=EXTERNAL)
    create(api, "wf", now=T0, tags=TARGETED)
    api("task.acquire", now=T0, id="wf", version=0, pid="worker", ttl=60_000)
    assert api("promise.register_callback", now=T0, awaited="child", awaiter="wf").status == 200
    messages_before = snapshot()["Message"]
    settle(api, "child", now=T0 + 5)
    assert task_of(api, "wf", T0 + 5) == {
        "id": "wf",
        "state": "acquired",
        "version": 1,
        "resumes": 1,
        "ttl": 60_000,
        "pid": "worker",
    }
    assert snapshot()["Message"] == messages_before
    assert callbacks() == set()


def test_timeout_always_wins_a_dead_awaiter_is_not_woken(api: Api) -> None:
    """C6: the awaiter's own deadline has passed when the awaited settles."""
    create(api, "child", now=T0, tags=EXTERNAL)
    _suspended_workflow(api, "child", deadline=T0 + 1_000)
    messages_before = snapshot()["Message"]
    settle(api, "child", now=T0 + 1_000)
    assert task_of(api, "wf", T0 + 1_000)["state"] == "fulfilled"
    assert Task.objects.get(pk="wf").state != "pending"
    assert snapshot()["Message"] == messages_before


def test_while_debug_has_paused_the_steps_a_settle_only_marks_subscriptions_ready(
    api: Api,
) -> None:
    with override_settings(RESONATE={"DEBUG": True}):
        assert api("debug.start", now=T0).status == 200
        create(api, "child", now=T0, tags=EXTERNAL)
        create(api, "job", now=T0, tags=TARGETED)
        assert executes() == {}
        _suspended_workflow(api, "child")
        api("promise.register_listener", now=T0, awaited="child", address="http://l/1")
        settle(api, "child", now=T0 + 10)
        assert list(Listener.objects.values_list("address", "ready")) == [("http://l/1", True)]
        assert list(Callback.objects.values_list("awaiter_id", "ready")) == [("wf", True)]
        assert not Message.objects.filter(kind="unblock").exists()
        assert task_of(api, "wf", T0 + 10)["state"] == "suspended"


# --- param / value round trip ---------------------------------------------------------------------


VALUES = [
    pytest.param({}, id="empty object"),
    pytest.param({"headers": {}}, id="headers {}"),
    pytest.param({"data": ""}, id='data ""'),
    pytest.param({"headers": {}, "data": ""}, id='headers {} and data ""'),
    pytest.param({"data": "eyJmdW5jIjoiZiIsImFyZ3MiOlsxXX0="}, id="base64 data"),
    pytest.param({"headers": {"a": "1", "B": "", "x:y.z": "w"}}, id="headers only"),
    pytest.param(
        {"headers": {"ключ": "значение ✓"}, "data": 'line1\nline2\t"q" \\ é 😀 \u2028'},
        id="unicode and escapes",
    ),
    pytest.param({"data": "{not json"}, id="data that is not JSON"),
    pytest.param({"data": "x" * 200_000}, id="200 kB of data"),
]


def test_nul_characters_are_refused_on_every_database(api: Api) -> None:
    """PostgreSQL cannot store NUL in text or jsonb, so it is a 400 everywhere."""
    before = snapshot()
    value = {"data": "a\u0000b", "headers": {"nul": "\u0000"}}
    res = api("promise.create", now=T0, id="p", timeoutAt=FAR, tags=EXTERNAL, param=value)
    assert res.status == 400
    assert "NUL" in res.data
    assert snapshot() == before


@pytest.mark.parametrize("value", VALUES)
def test_param_and_value_round_trip_exactly(api: Api, value: dict[str, Any]) -> None:
    created = create(api, "p", now=T0, tags=EXTERNAL, param=value)
    assert created["param"] == value
    assert api("promise.get", now=T0, id="p").data["promise"]["param"] == value
    settled = settle(api, "p", "resolved", now=T0 + 1, value=value)
    assert settled["value"] == value
    got = api("promise.get", now=T0 + 2, id="p").data["promise"]
    assert (got["param"], got["value"]) == (value, value)


# --- 400s through the dispatch ----------------------------------------------------------------


LONG_ID = "i" * 1025

BAD_REQUESTS = [
    # promise.create
    pytest.param("promise.create", {"timeoutAt": FAR}, "id", id="create: id missing"),
    pytest.param("promise.create", {"id": "", "timeoutAt": FAR}, "id", id="create: empty id"),
    pytest.param(
        "promise.create", {"id": LONG_ID, "timeoutAt": FAR}, "id", id="create: id of 1025"
    ),
    pytest.param("promise.create", {"id": 7, "timeoutAt": FAR}, "id", id="create: id a number"),
    pytest.param("promise.create", {"id": "new"}, "timeoutAt", id="create: timeoutAt missing"),
    pytest.param(
        "promise.create", {"id": "new", "timeoutAt": -1}, "timeoutAt", id="create: timeoutAt -1"
    ),
    pytest.param(
        "promise.create", {"id": "new", "timeoutAt": "5"}, "timeoutAt", id="create: timeoutAt str"
    ),
    pytest.param(
        "promise.create", {"id": "new", "timeoutAt": 1.5}, "timeoutAt", id="create: timeoutAt float"
    ),
    pytest.param(
        "promise.create", {"id": "new", "timeoutAt": True}, "timeoutAt", id="create: timeoutAt bool"
    ),
    pytest.param(
        "promise.create", {"id": "new", "timeoutAt": None}, "timeoutAt", id="create: timeoutAt null"
    ),
    pytest.param(
        "promise.create",
        {"id": "new", "timeoutAt": 2**63},
        "timeoutAt",
        id="create: timeoutAt 2^63",
    ),
    pytest.param(
        "promise.create",
        {"id": "new", "timeoutAt": FAR, "param": "x"},
        "param",
        id="create: param str",
    ),
    pytest.param(
        "promise.create",
        {"id": "new", "timeoutAt": FAR, "param": {"data": 1}},
        "data",
        id="create: param.data int",
    ),
    pytest.param(
        "promise.create",
        {"id": "new", "timeoutAt": FAR, "param": {"headers": {"h": 1}}},
        "param.headers",
        id="create: header value int",
    ),
    pytest.param(
        "promise.create",
        {"id": "new", "timeoutAt": FAR, "tags": ["a"]},
        "tags",
        id="create: tags list",
    ),
    pytest.param(
        "promise.create",
        {"id": "new", "timeoutAt": FAR, "tags": {"a": 1}},
        "tags",
        id="create: tag int",
    ),
    # promise.get
    pytest.param("promise.get", {}, "id", id="get: id missing"),
    pytest.param("promise.get", {"id": ""}, "id", id="get: empty id"),
    pytest.param("promise.get", {"id": LONG_ID}, "id", id="get: id of 1025"),
    pytest.param("promise.get", {"id": ["p"]}, "id", id="get: id a list"),
    # promise.settle (the spec's own 400: only resolved / rejected / rejected_canceled)
    pytest.param("promise.settle", {"id": "p"}, "state", id="settle: state missing"),
    pytest.param("promise.settle", {"id": "p", "state": "pending"}, "state", id="settle: pending"),
    pytest.param(
        "promise.settle", {"id": "p", "state": "rejected_timedout"}, "state", id="settle: timedout"
    ),
    pytest.param(
        "promise.settle", {"id": "p", "state": "RESOLVED"}, "state", id="settle: RESOLVED"
    ),
    pytest.param("promise.settle", {"id": "p", "state": ""}, "state", id="settle: empty state"),
    pytest.param("promise.settle", {"id": "p", "state": 1}, "state", id="settle: state int"),
    pytest.param("promise.settle", {"state": "resolved"}, "id", id="settle: id missing"),
    pytest.param(
        "promise.settle",
        {"id": "p", "state": "resolved", "value": {"data": 1}},
        "data",
        id="settle: value.data int",
    ),
    pytest.param(
        "promise.settle",
        {"id": "p", "state": "resolved", "value": []},
        "value",
        id="settle: value list",
    ),
    # promise.register_callback
    pytest.param(
        "promise.register_callback", {"awaited": "p"}, "awaiter", id="callback: awaiter missing"
    ),
    pytest.param(
        "promise.register_callback", {"awaiter": "p"}, "awaited", id="callback: awaited missing"
    ),
    pytest.param(
        "promise.register_callback",
        {"awaited": "", "awaiter": "w"},
        "awaited",
        id="callback: empty",
    ),
    pytest.param(
        "promise.register_callback",
        {"awaited": "p", "awaiter": "p"},
        "awaited",
        id="callback: self",
    ),
    # promise.register_listener
    pytest.param(
        "promise.register_listener", {"awaited": "p"}, "address", id="listener: address missing"
    ),
    pytest.param(
        "promise.register_listener", {"awaited": "p", "address": 5}, "address", id="listener: int"
    ),
    pytest.param(
        "promise.register_listener",
        {"id": "p", "address": "http://x"},
        "awaited",
        id="listener: id",
    ),
    pytest.param(
        "promise.register_listener",
        {"awaited": "p", "address": "poll://default"},
        "address",
        id="listener: poll",
    ),
    # promise.search
    pytest.param("promise.search", {"limit": 0}, "limit", id="search: limit 0"),
    pytest.param("promise.search", {"limit": -1}, "limit", id="search: limit -1"),
    pytest.param("promise.search", {"limit": 1001}, "limit", id="search: limit 1001"),
    pytest.param("promise.search", {"limit": "10"}, "limit", id="search: limit str"),
    pytest.param("promise.search", {"state": "done"}, "state", id="search: unknown state"),
    pytest.param("promise.search", {"state": "Pending"}, "state", id="search: Pending"),
    pytest.param("promise.search", {"tags": {"a": 1}}, "tags", id="search: tag int"),
    pytest.param("promise.search", {"cursor": 3}, "cursor", id="search: cursor int"),
]


@pytest.mark.parametrize(("kind", "data", "field"), BAD_REQUESTS)
@pytest.mark.parametrize("target_exists", [False, True], ids=["object absent", "object present"])
def test_malformed_requests_are_400_naming_the_field_and_write_nothing(
    api: Api, kind: str, data: dict[str, Any], field: str, target_exists: bool
) -> None:
    """400 is decided from the request alone, before any read (spec §3): the same answer
    whether or not the named promise exists."""
    if target_exists:
        create(api, "p", now=T0, tags=EXTERNAL)
        create(api, "w", now=T0, tags=TARGETED)
    before = snapshot()
    res = api(kind, now=T0 + 1, **data)
    assert res.status == 400, res.data
    assert names(res.data, field), res.data
    assert snapshot() == before


@pytest.mark.parametrize(
    "promise_id",
    [
        pytest.param("i" * 1024, id="1024 ASCII characters"),
        pytest.param("é" * 512, id="512 two-byte characters"),
        pytest.param(
            random_text(341, "".join(map(chr, range(0x4E00, 0x4F00)))), id="341 CJK characters"
        ),
        pytest.param(
            random_text(256, "".join(map(chr, range(0x20000, 0x20400)))),
            id="256 four-byte characters",
        ),
        pytest.param("a.b:c/d e", id="punctuation"),
    ],
)
def test_ids_up_to_1024_bytes_are_accepted(api: Api, promise_id: str) -> None:
    record = create(api, promise_id, now=T0, tags=TARGETED)
    assert record["id"] == promise_id
    assert api("promise.get", now=T0, id=promise_id).data == {"promise": record}
    assert task_of(api, promise_id, T0)["id"] == promise_id


@pytest.mark.parametrize("promise_id", ["é" * 513, "\U00020000" * 257])
def test_an_id_over_1024_bytes_is_400_naming_the_id(api: Api, promise_id: str) -> None:
    res = api("promise.create", now=T0, id=promise_id, timeoutAt=FAR, tags=TARGETED)
    assert res.status == 400
    assert "`id`" in res.data
    assert not Promise.objects.exists()


# --- promise.search -----------------------------------------------------------------------------


def _search_population(api: Api) -> None:
    """Eight promises, one per way of being in each projected state at NOW_S."""
    create(api, "live", now=T0)
    create(api, "dead", now=T0, timeout_at=NOW_S)
    create(api, "dead-timer", now=T0, timeout_at=NOW_S, tags=TIMER)
    for promise_id, state in [
        ("resolved", "resolved"),
        ("rejected", "rejected"),
        ("canceled", "rejected_canceled"),
    ]:
        create(api, promise_id, now=T0)
        settle(api, promise_id, state, now=T0 + 1)
    create(api, "born-dead", now=T0, timeout_at=T0)
    create(api, "born-dead-timer", now=T0, timeout_at=T0, tags=TIMER)


NOW_S = 40_000
ALL = [
    "born-dead",
    "born-dead-timer",
    "canceled",
    "dead",
    "dead-timer",
    "live",
    "rejected",
    "resolved",
]


@pytest.mark.parametrize(
    ("now", "state", "expected"),
    [
        pytest.param(NOW_S, None, ALL, id="no filter"),
        pytest.param(NOW_S, "pending", ["live"], id="pending at the deadline"),
        pytest.param(NOW_S - 1, "pending", ["dead", "dead-timer", "live"], id="pending 1ms before"),
        pytest.param(NOW_S, "rejected_timedout", ["born-dead", "dead"], id="timed out"),
        pytest.param(NOW_S - 1, "rejected_timedout", ["born-dead"], id="timed out 1ms before"),
        pytest.param(
            NOW_S, "resolved", ["born-dead-timer", "dead-timer", "resolved"], id="resolved"
        ),
        pytest.param(NOW_S, "rejected", ["rejected"], id="rejected"),
        pytest.param(NOW_S, "rejected_canceled", ["canceled"], id="canceled"),
    ],
)
def test_search_filters_on_the_projected_state_and_writes_nothing(
    api: Api, now: int, state: str | None, expected: list[str]
) -> None:
    _search_population(api)
    before = snapshot()
    res = api("promise.search", now=now, **({} if state is None else {"state": state}))
    assert res.status == 200, res.data
    found = res.data["promises"]
    assert [p["id"] for p in found] == expected
    assert "cursor" not in res.data
    for record in found:
        assert record == api("promise.get", now=now, id=record["id"]).data["promise"]
    assert snapshot() == before


@pytest.mark.parametrize(
    ("tags", "expected"),
    [
        pytest.param({"env": "prod"}, ["a", "c"], id="one tag"),
        pytest.param({"env": "prod", "team": "x"}, ["c"], id="every tag must match"),
        pytest.param({"env": "pro"}, [], id="no prefix match"),
        pytest.param({"env": "PROD"}, [], id="case-sensitive"),
        pytest.param({"missing": "prod"}, [], id="absent key"),
        pytest.param({"resonate:target": TARGET}, ["d"], id="resonate:target"),
        pytest.param({"a.b": "1"}, ["d"], id="key with a dot"),
        pytest.param({}, ["a", "b", "c", "d"], id="empty filter"),
    ],
)
def test_search_filters_on_exact_tags(api: Api, tags: dict[str, str], expected: list[str]) -> None:
    create(api, "a", tags={"env": "prod"})
    create(api, "b", tags={"env": "dev", "team": "x"})
    create(api, "c", tags={"env": "prod", "team": "x"})
    create(api, "d", tags={**TARGETED, "a.b": "1", "env": "production"})
    res = api("promise.search", now=T0, tags=tags)
    assert res.status == 200, res.data
    assert [p["id"] for p in res.data["promises"]] == expected


@pytest.mark.parametrize(
    ("count", "limit", "pages"),
    [
        pytest.param(25, 10, [10, 10, 5], id="25 by 10"),
        pytest.param(20, 10, [10, 10], id="20 by 10: no cursor on a full last page"),
        pytest.param(3, 1, [1, 1, 1], id="3 by 1"),
        pytest.param(0, 10, [0], id="none"),
        pytest.param(5, 1000, [5], id="limit 1000"),
        pytest.param(101, None, [100, 1], id="default limit 100"),
    ],
)
def test_search_pages_by_id_with_a_cursor_absent_on_the_last_page(
    api: Api, count: int, limit: int | None, pages: list[int]
) -> None:
    ids = [f"p{i:03d}" for i in range(count)]
    for promise_id in reversed(ids):
        create(api, promise_id)
    seen: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    for page in range(len(pages)):
        data: dict[str, Any] = {} if limit is None else {"limit": limit}
        if cursor is not None:
            data["cursor"] = cursor
        res = api("promise.search", now=T0, **data)
        assert res.status == 200, res.data
        found = [p["id"] for p in res.data["promises"]]
        seen += found
        sizes.append(len(found))
        cursor = res.data.get("cursor")
        if page < len(pages) - 1:
            assert cursor == found[-1]
    assert cursor is None
    assert sizes == pages
    assert seen == ids


def test_search_combines_state_tags_and_paging(api: Api) -> None:
    for i in range(12):
        create(
            api,
            f"p{i:02d}",
            tags={"g": "odd" if i % 2 else "even"},
            timeout_at=FAR if i < 6 else 20_000,
        )
    first = api(
        "promise.search", now=30_000, state="rejected_timedout", tags={"g": "even"}, limit=2
    )
    assert first.status == 200, first.data
    assert [p["id"] for p in first.data["promises"]] == ["p06", "p08"]
    second = api(
        "promise.search",
        now=30_000,
        state="rejected_timedout",
        tags={"g": "even"},
        limit=2,
        cursor=first.data["cursor"],
    )
    assert [p["id"] for p in second.data["promises"]] == ["p10"]
    assert "cursor" not in second.data
