"""P-05 promise.register_listener (spec digest §4): deliverable addresses, the 400s before any
read, an existing external promise, recorded only while live, deduplicated by address.
"""

from __future__ import annotations

import pytest

from outbox.models import Message
from tests.support.factories import FAR, Api
from tests.support.promise_kinds import (
    EXTERNAL,
    GLOBAL,
    INTERNAL,
    LOCAL,
    T0,
    TARGETED,
    TIMER,
    create,
    listeners,
    names,
    random_text,
    settle,
    snapshot,
)

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
