"""The promise kinds' 400s through the dispatch (spec digest §3): a malformed request names the
field and writes nothing; ids up to 1,024 bytes are accepted.
"""

from __future__ import annotations

from typing import Any

import pytest

from promises.models import Promise
from tests.support.factories import FAR, Api
from tests.support.promise_kinds import (
    EXTERNAL,
    T0,
    TARGETED,
    create,
    names,
    random_text,
    snapshot,
    task_of,
)

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
