"""P-01 promise.get (spec digest §4): 404 for an absent promise, the record create returned.

Table tests from the promise handlers' file (tests/support/promise_kinds.py: its helpers and how
"nothing was written" is checked).
"""

from __future__ import annotations

from tests.support.factories import Api
from tests.support.promise_kinds import (
    EXTERNAL,
    T0,
    create,
    snapshot,
)

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
