"""The models on a host's own ``AdminSite`` (docs/how-to/embedding.md). Its pages render, its
actions apply, and every link they carry stays on that site, even with the default admin mounted
too."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings

from promises import services as promises
from promises.models import Promise
from resonate_project.core.clock import now_ms
from tests.support.factories import FAR

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.support.custom_admin_site")]


@pytest.fixture
def ops(db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "r@example.com", "pw"))
    return client


def admin_links(html: str) -> set[str]:
    return {h for h in re.findall(r'href="(/(?:ops|admin)/[^"]*)"', html) if "/logout" not in h}


@override_settings(ALLOWED_HOSTS=["testserver"])
def test_the_pages_and_their_links_stay_on_the_hosts_site(ops: Client) -> None:
    now = now_ms()
    promises.promise_create(
        id="wf/1",
        timeout_at=FAR,
        tags={"resonate:target": "poll://any@billing"},
        now=now,
    )
    promises.promise_create(id="wf/2", timeout_at=FAR, now=now)
    pages = [
        "/ops/",
        "/ops/promises/promise/",
        "/ops/promises/promise/wf/1/change/",
        "/ops/tasks_app/task/",
        "/ops/schedules/schedule/",
        "/ops/outbox/message/",
    ]
    for page in pages:
        res = ops.get(page)
        assert res.status_code == 200, page
        stray = {h for h in admin_links(res.content.decode()) if not h.startswith("/ops/")}
        assert not stray, f"{page} links to another admin site: {sorted(stray)}"
    task_page = ops.get("/ops/tasks_app/task/")
    task_links = [h for h in admin_links(task_page.content.decode()) if "/change/" in h]
    assert task_links
    assert all(h.startswith("/ops/") for h in task_links)
    for link in task_links[:3]:
        assert ops.get(link).status_code == 200, link


def test_an_action_on_the_hosts_site_settles_and_returns_there(ops: Client) -> None:
    promises.promise_create(id="approval", timeout_at=FAR, now=now_ms())
    done = ops.post(
        "/ops/promises/promise/",
        {
            "action": "resolve_promises",
            "_selected_action": ["approval"],
            "apply": "yes",
            "value": '{"approved": true}',
        },
        follow=True,
    )
    assert done.status_code == 200
    assert all(url.startswith("/ops/") for url, _ in done.redirect_chain), done.redirect_chain
    assert Promise.objects.get(id="approval").state == "resolved"
