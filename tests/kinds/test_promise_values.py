"""A promise's param and value round trip exactly, and NUL characters are refused on every
database.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.factories import FAR, Api
from tests.support.promise_kinds import (
    EXTERNAL,
    T0,
    create,
    settle,
    snapshot,
)

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
