"""P-04 promise.register_callback (spec digest §4): refusals in the spec's order, a callback
recorded only while both promises are live (C11), registering twice records one.
"""

from __future__ import annotations

from typing import Any

import pytest

from promises.models import Callback
from tests.support.factories import FAR, Api
from tests.support.promise_kinds import (
    EXTERNAL,
    GLOBAL,
    INTERNAL,
    LOCAL,
    T0,
    TARGETED,
    TIMER,
    callbacks,
    create,
    names,
    settle,
    snapshot,
    task_of,
)

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
