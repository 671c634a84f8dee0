"""Issue #23: what one tenant's credential may read and address, whatever value it chooses.

Tenant B is a service credential limited to ``--prefix billing/ --group billing``; the other
tenant's work (``shipping/…``) is written by an admin. Each test names the finding it pins.
Every test runs the real HTTP path with ``RESONATE_AUTH=required``, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings

from promises.models import Listener, Promise
from resonate_project.access.credentials import credential_create
from resonate_project.edges.api import HandlerThreads
from tasks_app.models import Task
from tests.edges.test_one_path import (
    action_create,
    fence,
    serve,
    threads,  # noqa: F401  (the fixture)
)
from tests.edges.test_one_path import envelope as path_envelope
from tests.security.test_auth import ADMIN, envelope, settings_for, token
from tests.support.factories import FAR

SECRET = base64.b64encode(b"shipping-secret-param").decode()


@pytest.fixture
def required(db: Any) -> Iterator[None]:
    with override_settings(RESONATE=settings_for(PUSH_ALLOWED="127.0.0.1")):
        yield


@pytest.fixture
def billing(required: None) -> str:
    return credential_create(name="billing", now=1, prefix="billing/", groups=["billing"])[1]


def call(client: Client, kind: str, data: Any, bearer: str) -> tuple[int, Any]:
    res = client.post(
        "/",
        envelope(kind, data),
        content_type="application/json",
        headers={"Authorization": f"Bearer {bearer}"},
    )
    return res.status_code, json.loads(res.content)["data"]


def promise(id: str, **tags: str) -> dict[str, Any]:
    """A promise holding the other tenant's secret when its id is the other tenant's."""
    data = SECRET if id.startswith("shipping/") else base64.b64encode(id.encode()).decode()
    return {"id": id, "timeoutAt": FAR, "param": {"headers": {}, "data": data}, "tags": tags}


def shipping_tree(client: Client) -> None:
    """The other tenant's call tree: a root and a child on its branch, holding a secret."""
    for id in ("shipping/root", "shipping/s1"):
        tags = {"resonate:branch": "shipping/root", "resonate:external": "true"}
        assert call(client, "promise.create", promise(id, **tags), ADMIN)[0] == 200


def mentions_shipping(body: Any) -> bool:
    """Whether a reply carries a shipping record or its secret (the caller's own promises may
    carry the branch tag the admin gave them)."""
    text = json.dumps(body)
    return '"id": "shipping/' in text.lower() or SECRET in text


# --- finding 1: a read by a client-chosen tag value ----------------------------------------


def test_finding1_a_branch_tag_outside_the_prefix_is_refused(client: Client, billing: str) -> None:
    shipping_tree(client)
    tags = {"resonate:target": "poll://any@billing", "resonate:branch": "shipping/root"}
    status, data = call(client, "promise.create", promise("billing/t", **tags), billing)
    assert status == 403
    assert "resonate:branch" in data
    assert "prefix" in data
    assert not Promise.objects.filter(id="billing/t").exists()


@pytest.mark.parametrize("tag", ["resonate:parent", "resonate:origin", "resonate:schedule"])
def test_finding1_every_id_tag_is_checked_against_the_prefix(
    client: Client, billing: str, tag: str
) -> None:
    status, data = call(
        client, "promise.create", promise("billing/x", **{tag: "shipping/r"}), billing
    )
    assert status == 403
    assert tag in data
    own = promise("billing/y", **{tag: "billing/r"})
    assert call(client, "promise.create", own, billing)[0] == 200


def test_finding1_a_fenced_create_with_a_foreign_branch_is_refused(
    client: Client, billing: str
) -> None:
    shipping_tree(client)
    target = {"resonate:target": "poll://any@billing"}
    assert call(client, "promise.create", promise("billing/t", **target), billing)[0] == 200
    status, _ = call(
        client,
        "task.acquire",
        {"id": "billing/t", "version": 0, "pid": "w", "ttl": 60_000},
        billing,
    )
    assert status == 200
    inner = promise("billing/t.1", **{"resonate:branch": "shipping/root"})
    fence = {"id": "billing/t", "version": 1, "action": {"kind": "promise.create", "data": inner}}
    status, _data = call(client, "task.fence", fence, billing)
    assert status == 403
    assert not Promise.objects.filter(id="billing/t.1").exists()


def test_finding1_preload_never_carries_another_tenants_promises(
    client: Client, billing: str
) -> None:
    """Even where the branch was written by an admin (so no write check applies), the preload a
    prefix-limited worker gets holds only its own promises."""
    shipping_tree(client)
    tags = {"resonate:target": "poll://any@billing", "resonate:branch": "shipping/root"}
    assert call(client, "promise.create", promise("billing/t", **tags), ADMIN)[0] == 200
    own = promise("billing/t.1", **{"resonate:branch": "shipping/root"})
    assert call(client, "promise.create", own, ADMIN)[0] == 200
    acquire = {"id": "billing/t", "version": 0, "pid": "w", "ttl": 60_000}
    status, data = call(client, "task.acquire", acquire, billing)
    assert status == 200
    assert [p["id"] for p in data["preload"]] == ["billing/t.1"]
    assert not mentions_shipping(data)
    fence = {
        "id": "billing/t",
        "version": 1,
        "action": {
            "kind": "promise.create",
            "data": promise("billing/t.2", **{"resonate:external": "true"}),
        },
    }
    status, data = call(client, "task.fence", fence, billing)
    assert status == 200
    assert not mentions_shipping(data)
    suspend = {
        "id": "billing/t",
        "version": 1,
        "actions": [
            {
                "kind": "promise.register_callback",
                "data": {"awaited": "billing/t.2", "awaiter": "billing/t"},
            }
        ],
    }
    status, data = call(client, "task.suspend", suspend, billing)
    assert status in (200, 300)
    assert not mentions_shipping(data)
    # the admin, who may see everything, still gets the whole branch
    assert Task.objects.filter(promise_id="billing/t").exists()


# --- finding 3: prefixes compare exactly, case included, on SQLite too ---------------------


def test_finding3_prefix_narrowing_is_case_sensitive(client: Client, billing: str) -> None:
    for id in ("BILLING/secret", "billing/own"):
        target = {"resonate:target": "poll://any@billing"}
        assert call(client, "promise.create", promise(id, **target), ADMIN)[0] == 200
    for kind, key in (("promise.search", "promises"), ("task.search", "tasks")):
        for asked in ({}, {"idPrefix": "billing/"}, {"idPrefix": "bil"}):
            status, data = call(client, kind, asked, billing)
            assert status == 200
            assert [r["id"] for r in data[key]] == ["billing/own"], (kind, asked)
    schedule = {"cron": "* * * * *", "promiseTimeout": 1}
    for id in ("BILLING/s", "billing/s"):
        sched = {"id": id, "promiseId": f"{id}.{{{{.timestamp}}}}", **schedule}
        assert call(client, "schedule.create", sched, ADMIN)[0] == 200
    status, data = call(client, "schedule.search", {}, billing)
    assert [s["id"] for s in data["schedules"]] == ["billing/s"]
    auth = {"Authorization": f"Bearer {billing}"}
    for url in ("/api/promises", "/api/tasks", "/api/schedules", "/api/outbox"):
        res = client.get(url, headers=auth)
        assert res.status_code == 200, url
        assert "BILLING/" not in res.content.decode(), url
    res = client.get("/api/promises?idPrefix=BILLING/", headers=auth)
    assert res.status_code == 200
    assert "BILLING/" not in res.content.decode()
    # the other tenant's outbox row cannot be re-sent
    assert client.post("/api/outbox/BILLING/secret/resend", headers=auth).status_code == 404


def test_finding3_an_exact_prefix_with_glob_and_like_characters(
    client: Client, required: None
) -> None:
    """A prefix holding ``*``, ``?``, ``[``, ``%`` or ``_`` matches those characters literally."""
    token = credential_create(name="odd", now=1, prefix="a*[%_?/")[1]
    for id in ("a*[%_?/1", "aXX%_?/2", "ab[%x?/3", "a*[%_?/"):
        assert call(client, "promise.create", promise(id), ADMIN)[0] == 200
    _status, data = call(client, "promise.search", {}, token)
    assert [p["id"] for p in data["promises"]] == ["a*[%_?/", "a*[%_?/1"]


# --- finding 4: a staff session is governed by the admin's permissions ------------------------


def test_finding4_a_staff_session_needs_the_admins_permissions(
    client: Client, required: None
) -> None:
    assert call(client, "promise.create", promise("shipping/secret1"), ADMIN)[0] == 200
    user = User.objects.create_user("clerk", password="pw", is_staff=True)
    client.force_login(user)
    settle = {"state": "resolved", "value": {"headers": {}, "data": ""}}
    assert client.get("/api/promises").status_code == 403
    assert client.get("/api/promises/shipping/secret1").status_code == 403
    res = client.post(
        "/api/promises/shipping/secret1/settle", settle, content_type="application/json"
    )
    assert res.status_code == 403
    assert Promise.objects.get(id="shipping/secret1").state == "pending"
    user.user_permissions.add(Permission.objects.get(codename="view_promise"))
    user = User.objects.get(pk=user.pk)  # drop the permission cache
    client.force_login(user)
    assert client.get("/api/promises").status_code == 200
    res = client.post(
        "/api/promises/shipping/secret1/settle", settle, content_type="application/json"
    )
    assert res.status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="act_on_promise"))
    client.force_login(User.objects.get(pk=user.pk))
    res = client.post(
        "/api/promises/shipping/secret1/settle", settle, content_type="application/json"
    )
    assert res.status_code == 200
    assert Promise.objects.get(id="shipping/secret1").state == "resolved"
    # the docs need no model permission, only staff
    assert client.get("/api/docs/").status_code == 200


# --- finding 7: the Django tasks surface for a prefix-limited credential ----------------------


def test_finding7_django_tasks_list_for_a_prefix_credential(client: Client, billing: str) -> None:
    auth = {"Authorization": f"Bearer {billing}"}
    res = client.get("/api/django-tasks", headers=auth)
    assert res.status_code == 200
    assert res.json()["results"] == [] or all(
        r["id"].startswith("billing/") for r in res.json()["results"]
    )
    assert client.get("/api/django-tasks/billing/nothing", headers=auth).status_code == 404
    assert client.get("/api/django-tasks?status=READY", headers=auth).status_code == 200


def test_finding7_django_tasks_admin_search(admin_client: Client) -> None:
    res = admin_client.get("/admin/tasks_app/job/", {"q": "billing/"})
    assert res.status_code == 200


# --- finding 10: a group-limited credential addresses only its own groups --------------------


@pytest.mark.parametrize(
    "target",
    ["poll://any@shipping", "poll://uni@shipping/w9", "poll://any@shipping/w9"],
)
def test_finding10_a_target_in_another_group_is_refused(
    client: Client, billing: str, target: str
) -> None:
    status, data = call(
        client, "promise.create", promise("billing/t", **{"resonate:target": target}), billing
    )
    assert status == 403
    assert "shipping" in data
    assert not Promise.objects.filter(id="billing/t").exists()
    task = {
        "pid": "w",
        "ttl": 1000,
        "action": {
            "kind": "promise.create",
            "data": promise("billing/t", **{"resonate:target": target}),
        },
    }
    assert call(client, "task.create", task, billing)[0] == 403
    sched = {
        "id": "billing/s",
        "cron": "* * * * *",
        "promiseId": "billing/{{.timestamp}}",
        "promiseTimeout": 1,
        "promiseTags": {"resonate:target": target},
    }
    assert call(client, "schedule.create", sched, billing)[0] == 403
    auth = {"Authorization": f"Bearer {billing}"}
    res = client.post(
        "/api/promises",
        {"id": "billing/r", "timeoutAt": FAR, "tags": {"resonate:target": target}},
        content_type="application/json",
        headers=auth,
    )
    assert res.status_code == 403
    assert not Promise.objects.filter(id__startswith="billing/").exists()


def test_finding10_a_listener_in_another_group_is_refused(client: Client, billing: str) -> None:
    external = promise("billing/p", **{"resonate:external": "true"})
    assert call(client, "promise.create", external, billing)[0] == 200
    for address in ("poll://uni@shipping/w9", "poll://any@shipping"):
        listener = {"awaited": "billing/p", "address": address}
        status, data = call(client, "promise.register_listener", listener, billing)
        assert status == 403
        assert "shipping" in data
    assert not Listener.objects.exists()
    listener = {"awaited": "billing/p", "address": "poll://uni@billing/w1"}
    assert call(client, "promise.register_listener", listener, billing)[0] == 200


def test_finding10_push_only_to_the_credentials_own_hosts(client: Client, required: None) -> None:
    grouped = credential_create(name="g", now=1, prefix="g/", groups=["g"])[1]
    hosted = credential_create(
        name="h", now=1, prefix="h/", groups=["h"], push_hosts=["127.0.0.1"]
    )[1]
    anywhere = credential_create(name="any", now=1, prefix="x/")[1]
    url = "http://127.0.0.1:9/hook"
    ext = {"resonate:external": "true"}
    assert call(client, "promise.create", promise("g/p", **ext), grouped)[0] == 200
    listener = {"awaited": "g/p", "address": url}
    status, data = call(client, "promise.register_listener", listener, grouped)
    assert status == 403
    assert "127.0.0.1" in data
    assert call(client, "promise.create", promise("h/p", **ext), hosted)[0] == 200
    listener = {"awaited": "h/p", "address": url}
    assert call(client, "promise.register_listener", listener, hosted)[0] == 200
    listener = {"awaited": "h/p", "address": "http://127.0.0.2:9/hook"}
    assert call(client, "promise.register_listener", listener, hosted)[0] == 403
    assert call(client, "promise.create", promise("x/p", **ext), anywhere)[0] == 200
    listener = {"awaited": "x/p", "address": url}
    assert call(client, "promise.register_listener", listener, anywhere)[0] == 200


def test_finding10_a_jwt_groups_claim_limits_addresses(client: Client, required: None) -> None:
    limited = token({"prefix": "j/", "groups": ["j"]})
    tags = {"resonate:target": "poll://any@other"}
    assert call(client, "promise.create", promise("j/1", **tags), limited)[0] == 403
    tags = {"resonate:target": "poll://any@j"}
    assert call(client, "promise.create", promise("j/2", **tags), limited)[0] == 200
    hook = {"resonate:target": "http://127.0.0.1:9/x"}
    assert call(client, "promise.create", promise("j/3", **hook), limited)[0] == 403
    pusher = token({"prefix": "j/", "groups": ["j"], "push": ["127.0.0.1"]})
    assert call(client, "promise.create", promise("j/4", **hook), pusher)[0] == 200


# --- finding 1 through the envelope's threads: the fenced plain step's preload ------------------


@pytest.mark.django_db(transaction=True)
def test_finding1_the_threads_preload_is_scoped_too(
    threads: HandlerThreads,  # noqa: F811  (the fixture imported above)
) -> None:
    limited = token({"prefix": "billing/"})
    foreign = promise(
        "shipping/x", **{"resonate:branch": "billing/wf", "resonate:external": "true"}
    )
    root = action_create("billing/wf", "billing/wf", target=True)
    with override_settings(RESONATE=settings_for()):
        ((made, _),) = serve(path_envelope("promise.create", **foreign), auth=f"Bearer {ADMIN}")
        answers = serve(
            path_envelope("task.create", pid="w", ttl=60_000, action=root),
            fence("billing/wf", action_create("billing/wf:1", "billing/wf")),
            auth=f"Bearer {limited}",
        )
    assert made == 200
    assert [status for status, _ in answers] == [200, 200]
    for _, data in answers:
        assert [p["id"] for p in data["preload"]] == [] or all(
            p["id"].startswith("billing/") for p in data["preload"]
        )
        assert not mentions_shipping(data)
    assert [p["id"] for p in answers[1][1]["preload"]] == ["billing/wf:1"]
