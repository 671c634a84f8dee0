"""Issue #23: request sizes and values no database or clock can hold. Each is refused at the edge
with a 4xx naming the field and the limit, and writes nothing; a value the protocol allows (an
instant past year 9999) is stored, and every page that shows it renders."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from promises.models import Promise
from tasks_app.models import Task
from tests.conftest import FAR, Api

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
