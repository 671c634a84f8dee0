"""The console that explains a run (issue #25): the promise list's function column, call-tree and
date filters and function search; a run's page (timeline, tasks, listeners, messages); all on the
standalone admin and on a host's own ``AdminSite``, each page in a bounded number of queries.

Runs are written as the SDKs write them (``resonate-sdk`` 0.8.1's wire sequence): a root task
created with ``param.data = base64({"args", "kwargs", "func", "version"})``, a ``ctx.run`` child
with no param and no target, an ``rpc`` child with its own function and target, a timer.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.test import Client

from outbox.models import Message
from promises.models import Promise
from resonate_project.core.calls import function_name
from resonate_project.core.clock import now_ms
from resonate_project.edges.admin.kit import instant_input, parse_instant
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import FAR, Api

WORKERS = "poll://any@default"
LIST = "/admin/promises/promise/"


def call(func: str, *args: Any) -> dict[str, str]:
    body = {"args": list(args), "kwargs": {}, "func": func, "version": 1}
    return {"data": base64.b64encode(json.dumps(body).encode()).decode()}


def ok(api: Api, kind: str, now: int, **data: Any) -> dict[str, Any]:
    res = api(kind, now=now, **data)
    assert res.status == 200, (kind, res.status, res.data)
    result: dict[str, Any] = res.data
    return result


def tree_tags(root: str, parent: str, branch: str, **more: str) -> dict[str, str]:
    return {
        "resonate:origin": root,
        "resonate:parent": parent,
        "resonate:branch": branch,
        **more,
    }


def sdk_run(api: Api, root: str, now: int, *, finish: bool = True) -> None:
    """``countdown`` as the Python SDK runs it: a local step, an rpc to ``ntfy``, a sleep."""
    root_tags = tree_tags(root, root, root, **{"resonate:scope": "global"})
    ok(
        api,
        "task.create",
        now - 9_000,
        pid="worker-1",
        ttl=60_000,
        action={
            "kind": "promise.create",
            "head": {},
            "data": {
                "id": root,
                "timeoutAt": FAR,
                "param": call("countdown", 2, 1),
                "tags": {**root_tags, "resonate:target": WORKERS},
            },
        },
    )
    ok(
        api,
        "promise.register_listener",
        now - 8_900,
        awaited=root,
        address="poll://uni@default/worker-1",
    )
    local = f"{root}:1"
    ok(
        api,
        "promise.create",
        now - 8_800,
        id=local,
        timeoutAt=FAR,
        tags=tree_tags(root, root, root, **{"resonate:scope": "local"}),
    )
    ok(api, "promise.settle", now - 8_500, id=local, state="resolved", value={})
    rpc = f"{root}:2"
    ok(
        api,
        "promise.create",
        now - 8_400,
        id=rpc,
        timeoutAt=FAR,
        param=call("ntfy", 2),
        tags=tree_tags(root, root, rpc, **{"resonate:target": WORKERS}),
    )
    ok(api, "task.acquire", now - 8_300, id=rpc, version=0, pid="worker-2", ttl=60_000)
    ok(api, "task.fulfill", now - 7_000, id=rpc, version=1, action=settle(rpc, "rejected"))
    sleep = f"{root}:3"
    ok(
        api,
        "promise.create",
        now - 6_900,
        id=sleep,
        timeoutAt=now - 5_000,
        tags=tree_tags(root, root, sleep, **{"resonate:timer": "true"}),
    )
    if finish:
        ok(api, "task.fulfill", now - 4_000, id=root, version=1, action=settle(root, "resolved"))


def settle(id: str, state: str) -> dict[str, Any]:
    return {
        "kind": "promise.settle",
        "head": {},
        "data": {"id": id, "state": state, "value": {}},
    }


@pytest.fixture
def ops(db: Any) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    return client


def rows(html: str) -> list[str]:
    """The ids of the promise list's rows, in order."""
    return re.findall(r'<th class="field-id"><a href="[^"]*">([^<]+)</a>', html)


# --- the function name ---------------------------------------------------------------------------


def test_the_function_comes_from_what_the_sdks_send() -> None:
    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    assert function_name(call("countdown")["data"]) == "countdown"
    assert function_name(b64(b'{"func":"greet","args":[1],"version":1}')) == "greet"  # CLI, TS
    assert function_name(None) is None
    assert function_name(b64(b'["not", "a", "call"]')) is None
    assert function_name(b64(b'{"func": 7}')) is None
    assert function_name(b64(b'{"func": "a\\u0000b"}')) is None  # no database stores a NUL
    assert function_name("not base64 at all") is None


def test_a_promise_stores_its_function_and_parent(api: Api) -> None:
    sdk_run(api, "cd1", now_ms())
    stored = {p.id: (p.function, p.parent) for p in Promise.objects.all()}
    assert stored == {
        "cd1": ("countdown", "cd1"),
        "cd1:1": (None, "cd1"),  # ctx.run: the SDK sends no param
        "cd1:2": ("ntfy", "cd1"),
        "cd1:3": (None, "cd1"),  # a timer
    }


def test_an_untargeted_promise_has_no_function_whatever_its_param(api: Api) -> None:
    ok(api, "promise.create", 1_000, id="plain", timeoutAt=FAR, param=call("nope"), tags={})
    assert Promise.objects.get(id="plain").function is None


# --- the promise list ----------------------------------------------------------------------------


def test_the_list_shows_the_function_and_filters_roots_and_children(api: Api, ops: Client) -> None:
    now = now_ms()
    sdk_run(api, "cd1", now)
    sdk_run(api, "cd2", now)
    page = ops.get(LIST).content.decode()
    assert 'class="resonate-function">countdown<' in page
    assert 'class="resonate-function">ntfy<' in page
    assert "sleep (timer)" in page
    assert "local call" in page

    roots = rows(ops.get(LIST, {"tree": "root"}).content.decode())
    assert sorted(roots) == ["cd1", "cd2"]
    children = rows(ops.get(LIST, {"tree": "child"}).content.decode())
    assert sorted(children) == ["cd1:1", "cd1:2", "cd1:3", "cd2:1", "cd2:2", "cd2:3"]
    by_function = rows(ops.get(LIST, {"function": "ntfy"}).content.decode())
    assert sorted(by_function) == ["cd1:2", "cd2:2"]


def test_search_finds_a_function_by_its_name(api: Api, ops: Client) -> None:
    now = now_ms()
    sdk_run(api, "cd1", now)
    assert sorted(rows(ops.get(LIST, {"q": "count"}).content.decode())) == ["cd1"]
    assert sorted(rows(ops.get(LIST, {"q": "ntf"}).content.decode())) == ["cd1:2"]
    assert len(rows(ops.get(LIST, {"q": "cd1"}).content.decode())) == 4  # an id prefix still


def test_created_and_settled_ranges(api: Api, ops: Client) -> None:
    now = now_ms()
    ok(api, "promise.create", now - 3_600_000, id="old", timeoutAt=FAR, tags={})
    ok(api, "promise.create", now - 60_000, id="new", timeoutAt=FAR, tags={})
    ok(api, "promise.settle", now - 50_000, id="new", state="resolved", value={})
    # Past its deadline and not swept: projected as settled at its deadline.
    ok(api, "promise.create", now - 60_000, id="late", timeoutAt=now - 30_000, tags={})
    half_hour_ago = instant_input(now - 1_800_000)
    assert sorted(rows(ops.get(LIST, {"created_from": half_hour_ago}).content.decode())) == [
        "late",
        "new",
    ]
    assert rows(ops.get(LIST, {"created_to": half_hour_ago}).content.decode()) == ["old"]
    settled = rows(ops.get(LIST, {"settled_from": str(now - 55_000)}).content.decode())
    assert sorted(settled) == ["late", "new"]
    settled = rows(ops.get(LIST, {"settled_to": str(now - 40_000)}).content.decode())
    assert settled == ["new"]
    # The filter panel shows the bounds it applied, and keeps the other parameters.
    page = ops.get(LIST, {"created_from": half_hour_ago, "q": "ne"}).content.decode()
    assert f'name="created_from" value="{half_hour_ago}"' in page
    assert '<input type="hidden" name="q" value="ne">' in page


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("settled_to", "yesterday"),
        ("created_from", "2026-13-01"),
        ("created_to", str(2**63)),  # past a BIGINT
        ("settled_from", "-" + "9" * 19),
    ],
)
def test_a_bad_range_bound_is_a_400_naming_it(api: Api, ops: Client, name: str, value: str) -> None:
    ok(api, "promise.create", 1_000, id="p", timeoutAt=FAR, tags={})
    res = ops.get(LIST, {name: value})
    assert res.status_code == 400
    assert name in res.content.decode()
    assert value in res.content.decode()


def test_instants_read_as_utc() -> None:
    assert parse_instant("x", "1970-01-01") == 0
    assert parse_instant("x", "1970-01-01T00:00:01") == 1_000
    assert parse_instant("x", "1970-01-01T01:00:00+01:00") == 0
    assert parse_instant("x", "1970-01-01 00:00:02Z") == 2_000
    assert parse_instant("x", "1234") == 1_234
    assert instant_input(1_000) == "1970-01-01T00:00:01"


def test_the_list_stays_a_few_queries_over_many_rows(
    api: Api, ops: Client, django_assert_max_num_queries: Any
) -> None:
    now = now_ms()
    for i in range(40):
        sdk_run(api, f"run{i}", now)
    ops.get(LIST)  # the session and the user, cached from here on
    with django_assert_max_num_queries(10):
        res = ops.get(LIST, {"tree": "root"})
    assert len(rows(res.content.decode())) == 40
    with django_assert_max_num_queries(10):
        res = ops.get(LIST)
    assert len(rows(res.content.decode())) == 50  # a page


# --- a run's page --------------------------------------------------------------------------------


def run_url(id: str, site: str = "admin") -> str:
    return f"/{site}/promises/promise/{quote(id)}/run/"


def steps(html: str) -> list[tuple[str, str, str]]:
    """(id, depth, state) of each timeline row."""
    return re.findall(
        r'<tr class="step" data-id="([^"]+)" data-depth="(\d+)" data-state="([^"]+)"', html
    )


def test_the_run_page_shows_the_call_tree_as_a_timeline(api: Api, ops: Client) -> None:
    now = now_ms()
    sdk_run(api, "cd1", now, finish=False)
    page = ops.get(run_url("cd1"))
    assert page.status_code == 200
    html = page.content.decode()
    assert steps(html) == [
        ("cd1", "0", "pending"),
        ("cd1:1", "1", "resolved"),
        ("cd1:2", "1", "rejected"),
        ("cd1:3", "1", "resolved"),  # the timer, past its deadline: projected resolved
    ]
    timeline = html[html.index('id="timeline"') : html.index('id="run-tasks"')]
    assert "countdown" in timeline
    assert "ntfy" in timeline
    assert "local call" in timeline
    assert "+200ms" in timeline  # the local step started 200 ms into the run
    assert "300ms" in timeline  # and took 300 ms
    rpc = timeline[timeline.index('data-id="cd1:2"') :]
    assert '<td class="n attempts">1 / 0</td>' in rpc  # acquired once, never released
    assert 'class="bar open"' in timeline  # the root is still pending
    assert '<span class="failures">1</span> failed' in html

    tasks = html[html.index('id="run-tasks"') : html.index('id="run-listeners"')]
    assert 'data-id="cd1"' in tasks
    assert 'data-id="cd1:2"' in tasks
    assert "worker-1" in tasks  # the root's lease holder

    listeners = html[html.index('id="run-listeners"') : html.index('id="run-messages"')]
    assert "poll://uni@default/worker-1" in listeners


def test_the_run_page_lists_the_messages_still_owed(api: Api, ops: Client) -> None:
    now = now_ms()
    sdk_run(api, "cd1", now)
    messages = Message.objects.filter(key__startswith="cd1")
    assert messages.filter(kind="unblock").exists()  # the listener's, after the root settled
    html = ops.get(run_url("cd1")).content.decode()
    assert 'class="messagelist"' not in html  # the rows are not the messages framework's
    owed = html[html.index('id="run-messages"') :]
    assert 'data-kind="unblock"' in owed
    assert "poll://uni@default/worker-1" in owed


def test_a_child_opens_the_run_of_its_root(api: Api, ops: Client) -> None:
    sdk_run(api, "cd1", now_ms())
    res = ops.get(run_url("cd1:2"))
    assert res.status_code == 302
    assert res["Location"] == run_url("cd1")
    assert ops.get(run_url("missing")).status_code == 404


def test_the_run_page_stays_a_few_queries_however_many_calls(
    api: Api, ops: Client, django_assert_max_num_queries: Any
) -> None:
    now = now_ms()
    sdk_run(api, "big", now, finish=False)
    for i in range(60):
        child = f"big:c{i}"
        ok(
            api,
            "promise.create",
            now - 3_000,
            id=child,
            timeoutAt=FAR,
            param=call("ntfy", i),
            tags=tree_tags("big", "big", child, **{"resonate:target": WORKERS}),
        )
    ops.get(run_url("big"))
    with django_assert_max_num_queries(12):
        html = ops.get(run_url("big")).content.decode()
    assert len(steps(html)) == 64


def test_the_run_page_is_linked_from_the_list_and_the_promise(api: Api, ops: Client) -> None:
    sdk_run(api, "cd1", now_ms())
    assert f'href="{run_url("cd1")}"' in ops.get(LIST).content.decode()
    detail = ops.get(f"/admin/promises/promise/{quote('cd1:2')}/change/").content.decode()
    assert f'href="{run_url("cd1:2")}"' in detail


def test_a_task_without_progress_shows_its_releases(api: Api, ops: Client) -> None:
    now = now_ms()
    ok(
        api,
        "promise.create",
        now - 5_000,
        id="stuck",
        timeoutAt=FAR,
        param=call("missing_fn"),
        tags={"resonate:target": WORKERS},
    )
    for version in (1, 2, 3):
        ok(
            api,
            "task.acquire",
            now - 5_000 + version,
            id="stuck",
            version=version - 1,
            pid="w9",
            ttl=60_000,
        )
        ok(api, "task.release", now - 5_000 + version, id="stuck", version=version)
    task = Task.objects.get(pk="stuck")
    html = ops.get(run_url("stuck")).content.decode()
    tasks = html[html.index('id="run-tasks"') : html.index('id="run-listeners"')]
    assert f'<td class="n version">{task.version}</td>' in tasks
    assert f'<td class="n releases">{task.release_count}</td>' in tasks
    assert "w9" in tasks  # the last process that acquired it


# --- a host's own AdminSite ---------------------------------------------------------------------


@pytest.mark.urls("tests.support.custom_admin_site")
def test_the_run_page_and_filters_on_a_hosts_site(api: Api, ops: Client) -> None:
    sdk_run(api, "cd1", now_ms())
    res = ops.get(run_url("cd1", "ops"))
    assert res.status_code == 200
    html = res.content.decode()
    assert len(steps(html)) == 4
    links = set(re.findall(r'href="(/(?:ops|admin)/[^"]*)"', html)) - {"/admin/logout/"}
    assert links
    assert all(h.startswith("/ops/") for h in links), sorted(links)
    listing = ops.get("/ops/promises/promise/", {"tree": "root", "q": "count"}).content.decode()
    assert rows(listing) == ["cd1"]
    assert f'href="{run_url("cd1", "ops")}"' in listing


# --- the overview: functions, streams, workers ---------------------------------------------------

OVERVIEW = "/admin/overview/"


def a_call(api: Api, id: str, func: str, start: int, took: int, state: str = "resolved") -> None:
    ok(
        api,
        "promise.create",
        start,
        id=id,
        timeoutAt=FAR,
        param=call(func),
        tags={"resonate:target": WORKERS},
    )
    ok(api, "promise.settle", start + took, id=id, state=state, value={})


def section(html: str, id: str) -> str:
    start = html.index(f'id="{id}"')
    return html[start : html.index('<div class="module', start)]


def test_the_overview_charts_calls_failures_and_latency_per_function(api: Api, ops: Client) -> None:
    now = now_ms()
    # 20 calls of charge, 100 ms … 2000 ms, one every minute; every fifth one failed.
    for i in range(20):
        state = "rejected" if i % 5 == 0 else "resolved"
        a_call(api, f"charge-{i}", "charge", now - 1_800_000 + i * 60_000, (i + 1) * 100, state)
    a_call(api, "ship-1", "ship", now - 120_000, 40)
    a_call(api, "old", "charge", now - 7_200_000, 10)  # two hours ago: out of the window
    html = ops.get(OVERVIEW).content.decode()
    functions = section(html, "functions")
    charge = functions[functions.index('data-function="charge"') :]
    assert '<td class="n runs">20</td>' in charge
    assert ">4</a>" in charge  # failures, linked to the list
    assert '<td class="n p50">1s</td>' in charge  # the 10th of 20: 1000 ms
    assert '<td class="n p95">1s</td>' in charge  # the 19th: 1900 ms, shown to the second
    assert charge.count('class="minute"') >= 60
    assert functions.index('data-function="charge"') < functions.index('data-function="ship"')
    assert 'data-ms="1900"' in charge
    assert "?function=charge" in functions


def test_the_overview_lists_connected_streams_and_recent_workers(api: Api, ops: Client) -> None:
    from outbox.models import Subscriber

    now = now_ms()
    Subscriber.objects.create(group="default", stream_id="worker-1", process="web-a", seen_at=now)
    Subscriber.objects.create(group="default", stream_id="gone", process="web-b", seen_at=1_000)
    sdk_run(api, "cd1", now, finish=False)  # worker-1 holds cd1
    html = ops.get(OVERVIEW).content.decode()
    streams = section(html, "streams")
    assert 'data-id="worker-1"' in streams
    assert 'data-id="gone"' not in streams  # its process stopped refreshing it
    workers = section(html, "workers")
    row = workers[workers.index('data-pid="worker-1"') :]
    assert '<td class="n held">1</td>' in row
    assert "connected" in row
    # worker-2 has no stream and holds nothing, but fulfilled the rpc a moment ago.
    row = workers[workers.index('data-pid="worker-2"') :]
    assert '<td class="n finished">1</td>' in row


def test_the_overview_stays_a_few_queries_over_many_rows(
    api: Api, ops: Client, django_assert_max_num_queries: Any
) -> None:
    now = now_ms()
    for i in range(30):
        sdk_run(api, f"run{i}", now, finish=i % 2 == 0)
    for i in range(40):
        a_call(api, f"f{i}", f"fn{i % 12}", now - i * 30_000, 50 * i)
    ops.get(OVERVIEW)
    with django_assert_max_num_queries(20):
        html = ops.get(OVERVIEW).content.decode()
    assert section(html, "functions").count('class="function"') == 10  # the ten busiest


# --- schedules: add and edit from the admin -----------------------------------------------------

SCHEDULES = "/admin/schedules/schedule/"


def schedule_form(**fields: str) -> dict[str, str]:
    return {
        "id": "nightly",
        "cron": "0 3 * * *",
        "promise_id": "nightly.{{.timestamp}}",
        "promise_timeout": "3600000",
        "target": "poll://any@default",
        "param": '{"func": "backup", "args": [], "version": 1}',
        "tags": "",
        **fields,
    }


def test_an_operator_adds_a_schedule_through_the_handler(api: Api, ops: Client) -> None:
    assert ops.get(f"{SCHEDULES}add/").status_code == 200
    res = ops.post(f"{SCHEDULES}add/", schedule_form(tags='{"team": "ops"}'))
    assert res.status_code == 302, res.content.decode()[:2000]
    record = api("schedule.get", now=now_ms(), id="nightly").data["schedule"]
    assert record["cron"] == "0 3 * * *"
    assert record["promiseTags"] == {"resonate:target": "poll://any@default", "team": "ops"}
    assert function_name(record["promiseParam"]["data"]) == "backup"
    assert record["nextRunAt"] % 86_400_000 == 3 * 3_600_000  # 03:00 UTC
    from django.contrib.admin.models import LogEntry

    assert LogEntry.objects.filter(object_id="nightly").exists()


def test_a_bad_cron_is_refused_by_the_handler_and_nothing_is_saved(ops: Client) -> None:
    res = ops.post(f"{SCHEDULES}add/", schedule_form(cron="61 * * * *"))
    assert res.status_code == 200
    assert "not a valid 5- or 6-field cron expression" in res.content.decode()
    assert not Schedule.objects.exists()
    for refused in ({"tags": "[1]"}, {"promise_timeout": "-5"}, {"target": ""}):
        res = ops.post(f"{SCHEDULES}add/", schedule_form(**refused))
        assert res.status_code == 200, refused
        assert 'class="errorlist' in res.content.decode(), refused
    assert not Schedule.objects.exists()


def test_preview_lists_the_next_fire_times_and_saves_nothing(ops: Client) -> None:
    res = ops.post(f"{SCHEDULES}add/", {**schedule_form(cron="*/15 * * * *"), "_preview": "1"})
    assert res.status_code == 200
    html = res.content.decode()
    preview = html[html.index('id="schedule-preview"') :]
    assert "Every 15 minutes" in preview
    assert preview[: preview.index("</ol>")].count("<li>") == 5
    assert not Schedule.objects.exists()


def test_an_operator_edits_a_schedule_in_one_transaction(api: Api, ops: Client) -> None:
    ops.post(f"{SCHEDULES}add/", schedule_form())
    page = ops.get(f"{SCHEDULES}nightly/change/").content.decode()
    assert 'value="0 3 * * *"' in page
    assert "backup" in page
    res = ops.post(f"{SCHEDULES}nightly/change/", schedule_form(cron="30 4 * * 1-5"))
    assert res.status_code == 302
    record = api("schedule.get", now=now_ms(), id="nightly").data["schedule"]
    assert record["cron"] == "30 4 * * 1-5"
    assert function_name(record["promiseParam"]["data"]) == "backup"
    # A refused edit leaves the schedule as it was.
    res = ops.post(f"{SCHEDULES}nightly/change/", schedule_form(cron="nope"))
    assert res.status_code == 200
    assert Schedule.objects.get(id="nightly").cron == "30 4 * * 1-5"


def test_a_viewer_cannot_add_or_edit_schedules(api: Api, db: Any) -> None:
    from django.contrib.auth.models import Permission

    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_schedule"))
    client = Client()
    client.force_login(viewer)
    assert client.get(f"{SCHEDULES}add/").status_code == 403
    assert client.post(f"{SCHEDULES}add/", schedule_form()).status_code == 403
    assert not Schedule.objects.exists()


def test_the_migration_fills_in_the_columns_of_promises_stored_before_them(api: Api) -> None:
    import importlib

    from django.apps import apps
    from django.db import connection

    migration = importlib.import_module("promises.migrations.0003_promise_parent_function")
    sdk_run(api, "cd1", now_ms())
    Promise.objects.update(parent=None, function=None)  # as a database migrated before them

    class Editor:
        pass

    editor = Editor()
    editor.connection = connection  # type: ignore[attr-defined]
    migration.fill(apps, editor)
    stored = {p.id: (p.function, p.parent) for p in Promise.objects.all()}
    assert stored["cd1"] == ("countdown", "cd1")
    assert stored["cd1:2"] == ("ntfy", "cd1")
    assert stored["cd1:1"] == (None, "cd1")


@pytest.mark.urls("tests.support.custom_admin_site")
def test_schedules_are_added_and_previewed_on_a_hosts_site(api: Api, ops: Client) -> None:
    preview = ops.post("/ops/schedules/schedule/add/", {**schedule_form(), "_preview": "1"})
    assert 'id="schedule-preview"' in preview.content.decode()
    res = ops.post("/ops/schedules/schedule/add/", schedule_form())
    assert res.status_code == 302
    assert res["Location"].startswith("/ops/")
    assert api("schedule.get", now=now_ms(), id="nightly").status == 200


def test_a_runs_reads_keep_to_the_callers_scope(api: Api) -> None:
    """The run page's reads go through engine.scope like every read on a caller's behalf: under
    a tenant's prefix a tree never reaches promises outside it."""
    from promises.selectors import root_of, run_promises
    from resonate_project.core.principal import Principal
    from resonate_project.engine.scope import acting_as

    now = now_ms()
    sdk_run(api, "acme-1", now)
    ok(
        api,
        "promise.create",
        now,
        id="other-1",
        timeoutAt=FAR,
        tags=tree_tags("acme-1", "acme-1", "other-1"),
    )
    root = Promise.objects.get(id="acme-1")
    assert "other-1" in {p.id for p in run_promises(root, 50)[0]}
    with acting_as(Principal("tenant", prefix="acme-")):
        assert "other-1" not in {p.id for p in run_promises(root, 50)[0]}
    with acting_as(Principal("tenant", prefix="other-")):
        child = Promise.objects.get(id="other-1")
        assert root_of(child, 10).id == "other-1"  # its parent is not this tenant's to read


def test_a_stream_this_process_holds_shows_since_when(
    api: Api, ops: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The web process rendering the overview knows when it opened its own streams."""
    import asyncio

    from outbox import hub as hubs
    from outbox.models import Subscriber
    from resonate_project.core.present import iso

    held = hubs.Hub(clock=lambda: 1_000, autostart=False)  # no delivery thread in this test
    monkeypatch.setattr(hubs, "_hub", held)

    async def connect() -> hubs.Stream | None:
        return held.connect("default", "worker-7")

    stream = asyncio.run(connect())
    assert stream is not None
    now = now_ms()
    Subscriber.objects.create(
        group="default", stream_id="worker-7", process=hubs.PROCESS, seen_at=now
    )
    Subscriber.objects.create(group="default", stream_id="elsewhere", process="web-b", seen_at=now)
    html = ops.get(OVERVIEW).content.decode()
    streams = section(html, "streams")
    mine = streams[streams.index('data-id="worker-7"') :]
    assert iso(stream.opened_at) in mine[: mine.index("</tr>")]
    other = streams[streams.index('data-id="elsewhere"') :]
    assert "—" in other[: other.index("</tr>")]


@pytest.mark.urls("tests.support.promises_only_site")
def test_the_run_page_on_a_site_without_the_task_and_outbox_admins(api: Api, ops: Client) -> None:
    sdk_run(api, "cd1", now_ms())
    res = ops.get(run_url("cd1", "ops"))
    assert res.status_code == 200
    html = res.content.decode()
    tasks = html[html.index('id="run-tasks"') : html.index('id="run-listeners"')]
    assert '<td class="nowrap">cd1</td>' in tasks  # named, not linked
    assert 'data-kind="unblock"' in html


def test_a_tasks_page_links_to_its_run(api: Api, ops: Client) -> None:
    sdk_run(api, "cd1", now_ms())
    page = ops.get(f"/admin/tasks_app/task/{quote('cd1:2')}/change/").content.decode()
    assert f'href="{run_url("cd1:2")}"' in page
