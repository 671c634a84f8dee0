"""The console that explains a run, in a real browser (Playwright driving Debian's Chromium at
1400 px against a live server): the promise list's ids on one line, its filters and function
search, a run's timeline opened from the list, the per-function charts, streams and workers on the
overview, and a schedule added from the admin after a preview.

Without Chromium the test is skipped with the reason, except under ``CI=true`` (a failure). The
database is prepared before the browser starts and read after it stops (Playwright's sync API
keeps an event loop in this thread, where Django refuses ORM calls).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from outbox.models import Subscriber
from resonate_project.core.clock import now_ms
from schedules.models import Schedule
from tests.admin.test_admin_browser import CHROMIUM, CHROMIUM_ARGS, PASSWORD, require_chromium
from tests.admin.test_console import a_call, sdk_run
from tests.support.factories import Api

pytestmark = pytest.mark.django_db(transaction=True)


def log_in(page: Any, admin: str) -> None:
    page.goto(admin)
    page.fill("#id_username", "ops")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#user-tools")


def test_an_operator_follows_a_run_from_the_promise_list(api: Api, live_server: Any) -> None:
    require_chromium()
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("ops", "ops@example.com", PASSWORD)
    now = now_ms()
    sdk_run(api, "countdown-2026-12-02T14:00:00.000Z-a1b2c3d4", now, finish=False)
    sdk_run(api, "countdown-2026-12-02T13:00:00.000Z-e5f6a7b8", now)
    for i in range(12):
        a_call(api, f"charge-{i}", "charge", now - 600_000 + i * 40_000, 100 * (i + 1))
    # Refreshed "later": a hub refreshes its rows every few seconds, and none runs here.
    Subscriber.objects.create(
        group="default", stream_id="worker-1", process="web", seen_at=now + 600_000
    )
    admin = f"{live_server.url}/admin/"
    root = "countdown-2026-12-02T14:00:00.000Z-a1b2c3d4"

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            log_in(page, admin)
            page.goto(f"{admin}promises/promise/")

            # Each id on one line: its link is as tall as one line of its own text.
            links = page.locator("#result_list th.field-id a")
            expect(links.first).to_be_visible()
            for i in range(links.count()):
                box = links.nth(i).bounding_box()
                line = links.nth(i).evaluate(
                    "e => parseFloat(getComputedStyle(e).lineHeight) || "
                    "parseFloat(getComputedStyle(e).fontSize) * 1.4"
                )
                assert box is not None
                assert box["height"] < 1.5 * line, (links.nth(i).inner_text(), box, line)

            page.click("#changelist-filter a:text-is('roots (runs)')")
            expect(page.locator("#result_list tbody tr")).to_have_count(2 + 12)
            page.fill("#searchbar", "count")
            page.press("#searchbar", "Enter")
            expect(page.locator("#result_list tbody tr")).to_have_count(2)
            expect(page.locator("#result_list .field-function_column").first).to_contain_text(
                "countdown"
            )

            # A created range that leaves out everything.
            form = page.locator("form[data-range=created_from]")
            form.locator("input[name=created_from]").fill("2000-01-01T00:00:00")
            form.locator("input[name=created_to]").fill("2000-01-02T00:00:00")
            form.locator("input[type=submit]").click()
            expect(page.locator("#result_list tbody tr")).to_have_count(0)
            page.click("form[data-range=created_from] a:text-is('clear')")
            expect(page.locator("#result_list tbody tr")).to_have_count(2)

            row = page.locator("#result_list tr", has=page.locator(f"a:text-is('{root}')"))
            row.locator("a.resonate-run").click()
            expect(page.locator("h1")).to_have_text(f"Run {root}")
            steps = page.locator("#timeline tr.step")
            expect(steps).to_have_count(4)
            expect(steps.nth(0)).to_have_attribute("data-state", "pending")
            expect(steps.nth(2).locator(".function")).to_have_text("ntfy")
            expect(steps.nth(2)).to_have_attribute("data-state", "rejected")
            bars = page.locator("#timeline .bar")
            for i in range(bars.count()):
                box = bars.nth(i).bounding_box()
                assert box is not None
                assert box["width"] > 0
            expect(page.locator("#run-tasks")).to_contain_text("worker-1")
            expect(page.locator("#run-listeners")).to_contain_text("poll://uni@default/worker-1")

            page.goto(f"{admin}overview/")
            charge = page.locator("#functions tr[data-function=charge]")
            expect(charge.locator(".runs")).to_have_text("12")
            expect(charge.locator("svg.function-runs g.minute")).to_have_count(60)
            expect(charge.locator("svg.function-latency g.p95")).to_have_count(1)
            expect(page.locator("#streams tr.stream[data-id=worker-1]")).to_have_count(1)
            expect(page.locator("#workers tr.worker[data-pid=worker-1] .held")).to_have_text("1")
        finally:
            browser.close()


def test_an_operator_adds_a_schedule_after_previewing_it(live_server: Any, db: Any) -> None:
    require_chromium()
    from playwright.sync_api import expect, sync_playwright

    User.objects.create_superuser("ops", "ops@example.com", PASSWORD)
    admin = f"{live_server.url}/admin/"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            log_in(page, admin)
            page.goto(f"{admin}schedules/schedule/")
            page.click("#content-main a.addlink")
            page.fill("#id_id", "nightly-backup")
            page.fill("#id_cron", "0 3 * * *")
            page.fill("#id_param", '{"func": "backup", "args": [], "version": 1}')
            page.click("input[name=_preview]")
            preview = page.locator("#schedule-preview")
            expect(preview).to_contain_text("At 03:00")
            expect(preview.locator("li")).to_have_count(5)
            page.fill("#id_cron", "0 25 * * *")
            page.click("input[name=_save]")
            expect(page.locator(".errorlist")).to_contain_text("cron")
            page.fill("#id_cron", "30 2 * * *")
            page.click("input[name=_save]")
            expect(page.locator(".messagelist")).to_contain_text("nightly-backup")
        finally:
            browser.close()
    s = Schedule.objects.get(id="nightly-backup")
    assert s.cron == "30 2 * * *"
    assert s.promise_tags == {"resonate:target": "poll://any@default"}
