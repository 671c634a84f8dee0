"""The operator overview (``/admin/overview/``) and the per-minute request counts behind it.

The page reads the wall clock, so the data is made around the real now (``T``): deadlines far
ahead, or already behind. Request counts are flushed by calling ``traffic.flush`` with a ``now``
(the flusher thread only runs in served web processes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model, Sum
from django.test import Client
from django.urls import reverse

from outbox.models import Message, RequestMinute
from promises.models import Promise
from resonate_project.core.clock import now_ms
from resonate_project.runtime import traffic
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import FAR, Api

URL = "/admin/overview/"
WORKERS = {"resonate:target": "poll://any@workers"}
MODELS: list[type[Model]] = [Promise, Task, Schedule, Message]
VIEW = ["view_promise", "view_task", "view_schedule", "view_message"]
MINUTE = 60_000


@pytest.fixture
def T(db: Any) -> int:
    return now_ms()


@pytest.fixture(autouse=True)
def no_counts() -> Iterator[None]:
    """The counter is per process: start and end each test with nothing counted."""
    traffic.take()
    yield
    traffic.take()


def staff(username: str, codenames: list[str]) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    types = [ContentType.objects.get_for_model(m) for m in MODELS]
    user.user_permissions.set(
        Permission.objects.filter(content_type__in=types, codename__in=codenames)
    )
    return user


def as_user(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer(db: Any) -> Client:
    return as_user(staff("viewer", VIEW))


def ok(api: Api, kind: str, now: int, **data: Any) -> None:
    res = api(kind, now=now, **data)
    assert res.status == 200, (kind, res.status, res.data)


def known_state(api: Api, T: int) -> None:
    """Promises and tasks in known projected states, overdue work, and a known outbox."""
    ok(api, "promise.create", T - 9_000, id="open-1", timeoutAt=FAR, tags={})
    ok(api, "promise.create", T - 9_000, id="open-2", timeoutAt=FAR, tags={})
    ok(api, "promise.create", T - 9_000, id="paid", timeoutAt=FAR, tags={})
    ok(api, "promise.settle", T - 8_000, id="paid", state="resolved", value={})
    ok(api, "promise.create", T - 9_000, id="refused", timeoutAt=FAR, tags={})
    ok(api, "promise.settle", T - 8_000, id="refused", state="rejected", value={})
    # Past their deadline, still stored pending: projected timed out / resolved (a timer).
    ok(api, "promise.create", T - 300_000, id="late", timeoutAt=T - 120_000, tags={})
    timer = {"resonate:timer": "true"}
    ok(api, "promise.create", T - 300_000, id="nap", timeoutAt=T - 60_000, tags=timer)
    # Tasks: one acquired with its lease held, one whose lease ran out 50 s ago, and one pending
    # whose retry is long overdue (created 10 minutes ago, nobody acquired it).
    for task_id, now, ttl in (("held", T - 1_000, 600_000), ("stuck", T - 60_000, 10_000)):
        action = {
            "kind": "promise.create",
            "head": {},
            "data": {"id": task_id, "timeoutAt": FAR, "param": {}, "tags": WORKERS},
        }
        ok(api, "task.create", now, pid="w", ttl=ttl, action=action)
    ok(api, "promise.create", T - 600_000, id="waiting", timeoutAt=FAR, tags=WORKERS)
    ok(
        api,
        "schedule.create",
        T - 3 * 3_600_000,
        id="hourly",
        cron="0 * * * *",
        promiseId="hourly-{{.timestamp}}",
        promiseTimeout=60_000,
    )
    Message.objects.all().delete()
    rows = [
        # poll: one due for 2 minutes, one not due yet
        ("poll-due", "poll://any@workers/a", T - 120_000, T - 1, 0, "", None),
        ("poll-later", "poll://any@workers/b", T - 5_000, T + 60_000, 1, "", None),
        # push: one due for 30 s, two failing at one host (one of them dead), one at another host
        ("push-due", "https://ok.example.com/run", T - 30_000, T - 30_000, 0, "", None),
        (
            "pay-1",
            "https://pay.example.com/a",
            T - 90_000,
            T + 5_000,
            4,
            "503 Service Unavailable",
            None,
        ),
        ("pay-2", "https://pay.example.com/b?x=1", T - 80_000, T, 50, "timed out", T - 1_000),
        (
            "ship-1",
            "http://ship.example.com:8080/s",
            T - 70_000,
            T + 9_000,
            2,
            "connection refused",
            None,
        ),
    ]
    for key, address, created, next_at, attempts, error, dead in rows:
        Message.objects.create(
            key=key,
            kind="unblock",
            address=address,
            promise={"id": key, "state": "resolved"},
            created_at=created,
            next_attempt_at=next_at,
            attempts=attempts,
            last_error=error,
            dead_at=dead,
            poll_route=address.removeprefix("poll://any@") if address.startswith("poll") else None,
        )


def cell(html: str, row_marker: str) -> list[str]:
    """The link texts of the table row that contains ``row_marker``."""
    for tr in re.findall(r"<tr.*?</tr>", html, flags=re.S):
        if row_marker in tr:
            return [m.strip() for m in re.findall(r"<a href=\"[^\"]*\">([^<]*)</a>", tr)]
    raise AssertionError(f"no row with {row_marker}")


def linked(html: str, href: str) -> str:
    """The text of the link to ``href`` (exactly one)."""
    found = re.findall(rf'<a href="{re.escape(href)}">([^<]*)</a>', html)
    assert len(found) == 1, (href, found)
    return str(found[0]).strip()


def test_the_overview_counts_by_state_backlog_lag_and_failing_destinations(
    api: Api, viewer: Client, T: int
) -> None:
    known_state(api, T)
    res = viewer.get(URL)
    assert res.status_code == 200
    html = res.content.decode()
    promises = reverse("admin:promises_promise_changelist")
    tasks = reverse("admin:tasks_app_task_changelist")
    messages = reverse("admin:outbox_message_changelist")
    schedules = reverse("admin:schedules_schedule_changelist")

    # Projected states: the two overdue promises count as settled, as the lists show them.
    expected_promises = {
        # open-1, open-2 and the three tasks' promises
        "pending": "5",
        "resolved": "2",  # paid, nap (a timer past its deadline)
        "rejected": "1",
        "rejected_canceled": "0",
        "rejected_timedout": "1",  # late
    }
    for state, count in expected_promises.items():
        assert linked(html, f"{promises}?state={state}") == count, state
    expected_tasks = {"pending": "1", "acquired": "2", "suspended": "0", "halted": "0"}
    for state, count in expected_tasks.items():
        assert linked(html, f"{tasks}?state={state}") == count, state
    assert linked(html, f"{tasks}?state=fulfilled") == "0"

    # The counts are those of the lists they link to.
    for state, count in expected_promises.items():
        listing = viewer.get(f"{promises}?state={state}")
        assert len(listing.context["cl"].result_list) == int(count), state

    # Outbox backlog per transport, the oldest due message's age, dead letters.
    now = res.context["now"]
    assert cell(html, 'data-transport="poll"') == ["2", "1"]
    assert cell(html, 'data-transport="push"') == ["3", "1"]
    poll, push = res.context["backlog"]
    assert (poll.transport, poll.due.oldest) == ("poll", now - (T - 120_000))
    assert (push.transport, push.due.oldest) == ("push", now - (T - 30_000))
    assert re.search(r'data-transport="poll".*?class="n age">2m', html, flags=re.S)
    assert linked(html, f"{messages}?transport=poll&amp;due=now") == "1"
    assert linked(html, f"{messages}?dead=yes") == "1"

    # Step lag, each linked to the list of its rows.
    assert linked(html, f"{promises}?overdue=yes") == "2"  # late, nap
    assert linked(html, f"{tasks}?lease=expired") == "1"  # stuck
    assert linked(html, f"{tasks}?retry=overdue") == "1"  # waiting
    assert linked(html, f"{schedules}?due=overdue") == "1"
    for url in (f"{tasks}?lease=expired", f"{tasks}?retry=overdue", f"{schedules}?due=overdue"):
        assert len(viewer.get(url).context["cl"].result_list) == 1, url
    ages = {f.label: f.oldest for f in res.context["lag"]}
    assert ages == {
        "promises past their timeout, still stored pending": now - (T - 120_000),
        "tasks with an expired lease": now - (T - 50_000),
        "tasks with a retry overdue": ages["tasks with a retry overdue"],
        "schedules past their next run": ages["schedules past their next run"],
    }
    assert ages["tasks with a retry overdue"] >= 590_000

    # Failing push destinations: by host, most messages first, with the last error.
    failing = res.context["failing"]
    assert [(d.name, d.messages, d.dead, d.attempts, d.last_error) for d in failing] == [
        ("https://pay.example.com", 2, 1, 50, "timed out"),
        ("http://ship.example.com:8080", 1, 0, 2, "connection refused"),
    ]
    pay = viewer.get(failing[0].url)
    assert {m.pk for m in pay.context["cl"].result_list} == {"pay-1", "pay-2"}


def post(client: Client, kind: str, data: dict[str, Any]) -> int:
    body = json.dumps({"kind": kind, "head": {"corrId": "c"}, "data": data})
    return int(client.post("/", data=body, content_type="application/json").status_code)


def test_requests_are_counted_per_minute_and_charted_once_flushed(
    api: Api, viewer: Client, T: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client()
    ok(api, "promise.create", T, id="p", timeoutAt=FAR, tags={})
    assert [post(client, "promise.get", {"id": "p"}) for _ in range(3)] == [200, 200, 200]
    assert post(client, "promise.get", {"id": "missing"}) == 404
    assert post(client, "promise.get", {}) == 400

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr("resonate_project.edges.envelope.run", broken)
    assert post(client, "promise.get", {"id": "p"}) == 500
    monkeypatch.undo()
    assert not RequestMinute.objects.exists()  # counted in memory only

    assert traffic.flush(now_ms()) == 6
    totals = RequestMinute.objects.aggregate(
        ok=Sum("ok"), client=Sum("client_errors"), server=Sum("server_errors")
    )
    assert totals == {"ok": 3, "client": 2, "server": 1}
    assert traffic.flush(now_ms()) == 0  # nothing counted twice

    html = viewer.get(URL).content.decode()
    assert re.search(r'class="total">6<', html)
    assert re.search(r'class="client-errors">2<', html)
    assert re.search(r'class="server-errors">1<', html)
    bars = re.findall(r'<g class="minute" data-minute="(\d+)" data-total="(\d+)">', html)
    assert len(bars) == 60
    assert sum(int(total) for _, total in bars) == 6
    assert 'class="server_errors"' in html  # the 5xx share of its bar


def test_a_flush_adds_to_the_minute_and_prunes_the_day_before(db: Any) -> None:
    now = 1_000 * 86_400_000 + 30_000
    minute = now - 30_000
    RequestMinute.objects.create(minute_ms=minute, ok=5, client_errors=1, server_errors=0)
    RequestMinute.objects.create(minute_ms=minute - 25 * 3_600_000, ok=9)  # older than a day
    RequestMinute.objects.create(minute_ms=minute - 23 * 3_600_000, ok=7)
    for status in (200, 204, 409, 422, 503):
        traffic.record(status, now)
    traffic.record(200, now + MINUTE)
    assert traffic.flush(now + MINUTE) == 6
    rows = {
        r.minute_ms - minute: (r.ok, r.client_errors, r.server_errors)
        for r in RequestMinute.objects.all()
    }
    assert rows == {0: (7, 3, 1), MINUTE: (1, 0, 0), -23 * 3_600_000: (7, 0, 0)}


def test_a_failed_flush_keeps_its_counts_for_the_next(
    db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    traffic.record(200, 60_000)
    traffic.record(500, 120_000)

    def down(*args: Any) -> None:
        raise RuntimeError("database unavailable")

    monkeypatch.setattr(traffic, "_add", down)
    with pytest.raises(RuntimeError):
        traffic.flush(120_000)
    monkeypatch.undo()
    assert traffic.flush(120_000) == 2
    assert list(RequestMinute.objects.order_by("minute_ms").values_list("ok", "server_errors")) == [
        (1, 0),
        (0, 1),
    ]


def test_the_admin_index_links_to_the_overview(viewer: Client) -> None:
    html = viewer.get(reverse("admin:index")).content.decode()
    assert f'<a href="{URL}">Overview</a>' in html


def test_the_overview_shows_only_what_the_user_may_view(db: Any) -> None:
    messages_only = as_user(staff("outbox-viewer", ["view_message"]))
    res = messages_only.get(URL)
    assert res.status_code == 200
    assert "backlog" in res.context
    assert "promises" not in res.context
    assert "tasks" not in res.context
    assert 'id="promise-states"' not in res.content.decode()


def test_the_overview_is_for_staff_with_view_permissions(db: Any) -> None:
    anonymous = Client().get(URL)
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(reverse("admin:login"))
    not_staff = User.objects.create_user("someone", password="pw")
    refused = as_user(not_staff).get(URL)
    assert refused.status_code == 302
    assert refused["Location"].startswith(reverse("admin:login"))
    no_permission = as_user(staff("bare", []))
    assert no_permission.get(URL).status_code == 403


def test_undeliverable_messages_are_counted_apart_from_dead_letters(viewer: Client, T: int) -> None:
    common = {"kind": "unblock", "address": "poll://uni@g/gone", "created_at": T - 60_000}
    Message.objects.create(key="gone:notify:a", dead_at=T, undeliverable_at=T, **common)
    Message.objects.create(key="dead:notify:b", dead_at=T, **common)
    html = viewer.get(URL).content.decode()
    messages = "/admin/outbox/message/"
    assert linked(html, f"{messages}?dead=yes") == "1"
    assert linked(html, f"{messages}?dead=undeliverable") == "1"
    listing = viewer.get(f"{messages}?dead=undeliverable")
    assert [m.key for m in listing.context["cl"].result_list] == ["gone:notify:a"]
