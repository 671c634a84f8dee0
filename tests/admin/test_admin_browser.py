"""The operator console in a real browser (Playwright driving Debian's Chromium) against a live
server: log in, find a promise by id, resolve it, and see the new state and the task it woke.

Without Chromium the test is skipped with the reason, except under ``CI=true``, where that is a
failure. With ``RESONATE_SCREENSHOT=1`` it also writes ``docs/images/admin-promises.png`` (a
picture of the promise list) and ``docs/images/admin-overview.png`` (the operator
overview), so an ordinary run never rewrites them.

The database is prepared before the browser starts and read after it stops: Playwright's sync API
keeps an event loop in this thread, and Django refuses ORM calls from a thread with one.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from outbox.models import Message
from promises.models import Promise
from resonate_project.core.clock import now_ms
from resonate_project.runtime import traffic
from tasks_app.models import Task
from tests.support.factories import Api

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "admin-promises.png"
OVERVIEW_SCREENSHOT = SCREENSHOT.with_name("admin-overview.png")
WORKERS = "poll://any@workers"
PASSWORD = "correct horse battery staple"
DAY = 86_400_000


def require_chromium() -> None:
    if os.access(CHROMIUM, os.X_OK):
        return
    reason = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI=true the browser test must run")
    pytest.skip(reason)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def ok(api: Api, kind: str, now: int, **data: Any) -> dict[str, Any]:
    res = api(kind, now=now, **data)
    assert res.status == 200, (kind, res.status, res.data)
    result: dict[str, Any] = res.data
    return result


def create_action(
    promise_id: str, timeout_at: int, tags: dict[str, str], param: str
) -> dict[str, Any]:
    data = {"id": promise_id, "timeoutAt": timeout_at, "param": {"data": b64(param)}, "tags": tags}
    return {"kind": "promise.create", "head": {}, "data": data}


def a_working_day(api: Api, now: int) -> None:
    """A workflow suspended on an approval, and promises in every state around it."""
    order = json.dumps({"order": 1042, "amount": "99.00"})
    ok(
        api,
        "task.create",
        now - 60_000,
        pid="worker-1",
        ttl=120_000,
        action=create_action("order-1042", now + DAY, {"resonate:target": WORKERS}, order),
    )
    tree = {"resonate:parent": "order-1042", "resonate:branch": "order-1042"}
    ok(
        api,
        "promise.create",
        now - 55_000,
        id="approval-42",
        timeoutAt=now + DAY,
        tags={**tree, "resonate:external": "true"},
    )
    ok(
        api,
        "promise.create",
        now - 58_000,
        id="order-1042.charge",
        timeoutAt=now + DAY,
        tags={**tree, "resonate:scope": "global"},
    )
    ok(
        api,
        "promise.settle",
        now - 57_000,
        id="order-1042.charge",
        state="resolved",
        value={"data": b64('{"charged": true}')},
    )
    suspend = {
        "kind": "promise.register_callback",
        "head": {},
        "data": {"awaited": "approval-42", "awaiter": "order-1042"},
    }
    ok(api, "task.suspend", now - 50_000, id="order-1042", version=1, actions=[suspend])
    ok(
        api,
        "promise.create",
        now - 40_000,
        id="order-1042.sleep",
        timeoutAt=now + 3_600_000,
        tags={**tree, "resonate:timer": "true"},
    )
    ok(
        api,
        "promise.create",
        now - 300_000,
        id="payment-7",
        timeoutAt=now - 120_000,
        tags={"resonate:target": "https://payments.internal/run"},
    )
    ok(api, "promise.create", now - 30_000, id="refund-9", timeoutAt=now + DAY, tags={})
    ok(api, "promise.settle", now - 20_000, id="refund-9", state="rejected_canceled")
    ok(api, "promise.create", now - 25_000, id="invoice-3", timeoutAt=now + DAY, tags={})
    ok(api, "promise.settle", now - 24_000, id="invoice-3", state="rejected")


def test_an_operator_resolves_a_promise_from_the_admin_and_the_task_resumes(
    api: Api, live_server: Any
) -> None:
    require_chromium()
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("ops", "ops@example.com", PASSWORD)
    a_working_day(api, now_ms())
    assert Task.objects.get(pk="order-1042").state == "suspended"
    Message.objects.all().delete()
    admin = f"{live_server.url}/admin/"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(admin)
            page.fill("#id_username", "ops")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            expect(page.locator("#user-tools")).to_contain_text("ops")

            page.goto(f"{admin}promises/promise/")
            page.fill("#searchbar", "approval-42")
            page.press("#searchbar", "Enter")
            expect(page.locator("#result_list tbody tr")).to_have_count(1)
            page.click("#result_list a:text-is('approval-42')")
            expect(page.locator(".field-state_view .resonate-state")).to_have_text("pending")
            expect(page.locator(".field-awaited_by_view")).to_contain_text("order-1042")

            page.click("input[value='Resolve…']")
            page.fill("textarea[name=value]", '{"approved": true}')
            page.click("input[name=apply]")

            expect(page.locator(".messagelist")).to_contain_text("approval-42: resolved")
            expect(page.locator(".field-state_view .resonate-state")).to_have_text("resolved")
            expect(page.locator(".field-value_view")).to_contain_text('"approved": true')

            page.goto(f"{admin}tasks_app/task/?q=order-1042")
            task_row = page.locator("#result_list tbody tr", has_text="order-1042")
            expect(task_row.locator(".resonate-state").first).to_have_text("pending")
            expect(task_row.locator(".field-resumes_column")).to_have_text("approval-42")

            page.goto(f"{admin}promises/promise/")
            listing = page.locator("#result_list")
            for pk, state in (
                ("approval-42", "resolved"),
                ("payment-7", "rejected_timedout"),  # overdue: projected, not yet swept
                ("order-1042", "pending"),
                ("order-1042.sleep", "pending"),
                ("refund-9", "rejected_canceled"),
            ):
                row = listing.locator("tr", has=page.locator(f"a:text-is('{pk}')"))
                expect(row.locator(".resonate-state").first).to_have_text(state)
            if os.environ.get("RESONATE_SCREENSHOT") == "1":
                page.click("#toggle-nav-sidebar")
                page.mouse.move(0, 0)
                SCREENSHOT.parent.mkdir(exist_ok=True)
                page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()

    approval = Promise.objects.get(pk="approval-42")
    assert approval.state == "resolved"
    assert base64.b64decode(approval.value_data or "") == b'{"approved": true}'
    task = Task.objects.get(pk="order-1042")
    assert (task.state, task.version, task.resumes) == ("pending", 1, ["approval-42"])
    assert Message.objects.filter(kind="execute", task_id="order-1042", version=1).exists()


def an_hour_of_traffic(now: int) -> None:
    """Requests per minute over the last hour, with some 4xx and a few 5xx, counted and flushed
    as a web process does."""
    traffic.take()
    for minutes_ago in range(60):
        at = now - minutes_ago * 60_000
        for i in range(40 + (minutes_ago * 7) % 25):
            traffic.record(200, at + i)
        for i in range(3 if minutes_ago % 4 == 0 else 0):
            traffic.record(404, at + i)
        for i in range(2 if minutes_ago % 11 == 3 else 0):
            traffic.record(503, at + i)
    traffic.flush(now)


def failing_push(now: int) -> None:
    for key, address, attempts, error, dead_at in (
        ("pay-1", "https://payments.example.com/run", 6, "503 Service Unavailable", None),
        ("pay-2", "https://payments.example.com/run", 50, "timed out after 10000 ms", now - 9_000),
        ("ship-1", "https://shipping.example.com/hook", 3, "connection refused", None),
    ):
        Message.objects.create(
            key=key,
            kind="unblock",
            address=address,
            promise={"id": key, "state": "resolved"},
            created_at=now - 600_000,
            next_attempt_at=now + 30_000,
            attempts=attempts,
            last_error=error,
            dead_at=dead_at,
        )


def test_an_operator_opens_the_overview_from_the_admin_index(api: Api, live_server: Any) -> None:
    require_chromium()
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("ops", "ops@example.com", PASSWORD)
    now = now_ms()
    a_working_day(api, now)
    failing_push(now)
    an_hour_of_traffic(now)
    admin = f"{live_server.url}/admin/"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(admin)
            page.fill("#id_username", "ops")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.click("#resonate-overview-link a:text-is('Overview')")

            expect(page.locator("h1")).to_have_text("Overview")
            states = page.locator("#promise-states")
            expect(states.locator("tr[data-state=rejected_timedout] a")).to_have_text("1")
            expect(states.locator("tr[data-state=pending] a")).to_have_text("3")
            expect(page.locator("#task-states tr[data-state=suspended] a")).to_have_text("1")
            expect(page.locator("svg.resonate-chart g.minute")).to_have_count(60)
            expect(page.locator("#dead-letters a")).to_have_text("1")
            expect(page.locator("#failing")).to_contain_text("https://payments.example.com")
            expect(page.locator("#failing")).to_contain_text("timed out after 10000 ms")

            page.click("#dead-letters a")
            expect(page.locator("#result_list tbody tr")).to_have_count(1)
            expect(page.locator("#result_list")).to_contain_text("pay-2")
            if os.environ.get("RESONATE_SCREENSHOT") == "1":
                page.go_back()
                page.click("#toggle-nav-sidebar")
                page.mouse.move(0, 0)
                OVERVIEW_SCREENSHOT.parent.mkdir(exist_ok=True)
                page.screenshot(path=str(OVERVIEW_SCREENSHOT), full_page=True)
        finally:
            browser.close()
