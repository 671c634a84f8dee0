"""The operator console (``/admin/``) through the Django test client.

Each action is driven as an operator drives it (a changelist action, or the button on a detail
page, then the intermediate form where there is one) and the test then reads the protocol state a
worker or client would see: records, task views, outbox rows. The admin reads the wall clock, so
the data is created around the real now (``T``) with deadlines far ahead or already behind.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model, Q
from django.test import Client
from django.urls import reverse

from outbox.delivery import claim
from outbox.models import Message
from outbox.services import resend
from promises.models import Promise
from resonate_project.core.clock import now_ms
from resonate_project.core.errors import NotFound
from resonate_project.edges.admin.kit import ms_datetime
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import FAR, Api

WORKERS = "poll://any@workers"
TARGET = {"resonate:target": WORKERS}
EXTERNAL = {"resonate:external": "true"}
TIMER = {"resonate:timer": "true"}
MODELS: list[type[Model]] = [Promise, Task, Schedule, Message]
ACT = ["act_on_promise", "act_on_task", "act_on_schedule", "act_on_message"]


# --- users and requests -----------------------------------------------------------------------


def staff(username: str, codenames: list[str]) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    types = [ContentType.objects.get_for_model(m) for m in MODELS]
    perms = Permission.objects.filter(content_type__in=types, codename__in=codenames)
    assert perms.count() == len(codenames), "a permission is missing (migration not applied?)"
    user.user_permissions.set(perms)
    return user


VIEW = ["view_promise", "view_task", "view_schedule", "view_message"]


@pytest.fixture
def operator(db: Any) -> User:
    return staff("operator", VIEW + ACT)


@pytest.fixture
def viewer(db: Any) -> User:
    return staff("viewer", VIEW)


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def op(operator: User) -> Client:
    return logged_in(operator)


@pytest.fixture
def ro(viewer: User) -> Client:
    return logged_in(viewer)


def changelist(model: type[Model]) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def detail(model: type[Model], pk: str) -> str:
    from django.contrib.admin.utils import quote

    opts = model._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(pk)])


def act(client: Client, model: type[Model], action: str, ids: list[str], **extra: str) -> Any:
    """POST a changelist action, following redirects, as the changelist's action bar does
    (``index``) unless ``extra`` says otherwise."""
    data: dict[str, Any] = {"action": action, "_selected_action": ids, **extra}
    return client.post(changelist(model), data, follow=True)


def apply(client: Client, model: type[Model], action: str, ids: list[str], **fields: str) -> Any:
    """The second post of an action with an intermediate page."""
    return act(client, model, action, ids, apply="yes", **fields)


def shown(response: Any) -> set[str]:
    return {str(obj.pk) for obj in response.context["cl"].result_list}


def texts(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def row(response: Any, pk: str) -> str:
    """The changelist row whose first column links to ``pk``."""
    html = response.content.decode()
    for tr in re.findall(r"<tr.*?</tr>", html, flags=re.S):
        if re.search(rf">{re.escape(pk)}</a>", tr):
            return str(tr)
    raise AssertionError(f"no row for {pk}")


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def log_of(user: User, pk: str) -> list[LogEntry]:
    return list(LogEntry.objects.filter(user=user, object_id=pk).order_by("id"))


# --- protocol helpers -----------------------------------------------------------------------------


@pytest.fixture
def T() -> int:
    """Now, for the data; the admin reads the clock itself a little later."""
    return now_ms()


def create_action(promise_id: str, timeout_at: int, tags: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "promise.create",
        "head": {},
        "data": {"id": promise_id, "timeoutAt": timeout_at, "param": {}, "tags": tags},
    }


def start_workflow(
    api: Api, task_id: str, now: int, timeout_at: int = FAR, pid: str = "worker-1"
) -> None:
    action = create_action(task_id, timeout_at, TARGET)
    res = api("task.create", now=now, pid=pid, ttl=60_000, action=action)
    assert res.status == 200, res.data


def suspend_on(api: Api, task_id: str, version: int, awaited: str, now: int) -> None:
    action = {
        "kind": "promise.register_callback",
        "head": {},
        "data": {"awaited": awaited, "awaiter": task_id},
    }
    res = api("task.suspend", now=now, id=task_id, version=version, actions=[action])
    assert res.status == 200, res.data


def fulfill(api: Api, task_id: str, version: int, now: int) -> int:
    action = {"kind": "promise.settle", "head": {}, "data": {"state": "resolved", "value": {}}}
    return api("task.fulfill", now=now, id=task_id, version=version, action=action).status


def stored(promise_id: str) -> Promise:
    return Promise.objects.get(pk=promise_id)


def task(task_id: str) -> Task:
    return Task.objects.get(pk=task_id)


def execute_for(task_id: str) -> Message | None:
    return Message.objects.filter(kind="execute", task_id=task_id).first()


# --- viewing ----------------------------------------------------------------------------------


def test_every_page_renders_read_only_for_a_viewer(api: Api, ro: Client, T: int) -> None:
    start_workflow(api, "wf", T)
    api("promise.create", now=T, id="job", timeoutAt=FAR, tags=TARGET)
    api(
        "schedule.create",
        now=T,
        id="nightly",
        cron="0 3 * * *",
        promiseId="nightly-{{.timestamp}}",
        promiseTimeout=60_000,
    )
    for model, pk in ((Promise, "wf"), (Task, "wf"), (Schedule, "nightly"), (Message, "job")):
        listing = ro.get(changelist(model))
        assert listing.status_code == 200, model
        assert listing.context["action_form"] is None, f"{model}: a viewer is offered actions"
        assert pk in shown(listing)
        page = ro.get(detail(model, pk))
        assert page.status_code == 200, model
        html = page.content.decode()
        assert "Operator actions" not in html
        assert 'type="submit" name="_save"' not in html  # no change form


def test_protocol_objects_have_no_add_change_or_delete_forms(
    api: Api, op: Client, ro: Client, T: int
) -> None:
    api("promise.create", now=T, id="p", timeoutAt=FAR, tags=EXTERNAL)
    for client in (op, ro):
        assert client.get(reverse("admin:promises_promise_add")).status_code == 403
        assert client.post(detail(Promise, "p"), {"state": "resolved"}).status_code == 403
        assert client.get(reverse("admin:promises_promise_delete", args=["p"])).status_code == 403
    assert stored("p").state == "pending"


def test_the_promise_list_shows_projected_states_with_readable_times(
    api: Api, ro: Client, T: int
) -> None:
    # Stored pending with the deadline behind: projected settled, not yet written by the step.
    api("promise.create", now=T - 10_000, id="overdue", timeoutAt=T - 5_000, tags=EXTERNAL)
    api("promise.create", now=T - 10_000, id="nap", timeoutAt=T - 5_000, tags=TIMER)
    api("promise.create", now=T, id="live", timeoutAt=FAR, tags=EXTERNAL)
    assert stored("overdue").state == stored("nap").state == "pending"

    page = ro.get(changelist(Promise))

    assert 'data-state="rejected_timedout"' in row(page, "overdue")
    assert 'data-state="resolved"' in row(page, "nap")
    assert 'data-state="pending"' in row(page, "live")
    assert ms_datetime(T - 5_000) in row(page, "overdue")  # timeout, and settled at the deadline
    assert row(page, "overdue").count(ms_datetime(T - 5_000)) == 2


@pytest.fixture
def varied(api: Api, T: int) -> None:
    api("promise.create", now=T, id="p-live", timeoutAt=FAR, tags=EXTERNAL)
    api("promise.create", now=T - 10_000, id="p-overdue", timeoutAt=T - 5_000, tags=EXTERNAL)
    api("promise.create", now=T - 10_000, id="p-nap", timeoutAt=T - 5_000, tags=TIMER)
    api("promise.create", now=T - 10_000, id="p-local", timeoutAt=T - 5_000, tags={})
    api("promise.create", now=T, id="p-done", timeoutAt=FAR, tags=EXTERNAL)
    api("promise.settle", now=T, id="p-done", state="resolved")
    api(
        "promise.create", now=T, id="job-1", timeoutAt=FAR, tags={"resonate:target": f"{WORKERS}/1"}
    )
    push = {"resonate:target": "https://hooks.example/run", "resonate:schedule": "nightly"}
    api("promise.create", now=T, id="job-2", timeoutAt=FAR, tags=push)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"state": "rejected_timedout"}, {"p-overdue", "p-local"}),
        ({"state": "resolved"}, {"p-nap", "p-done"}),
        ({"state": "pending"}, {"p-live", "job-1", "job-2"}),
        ({"overdue": "yes"}, {"p-overdue", "p-nap", "p-local"}),
        ({"kind": "timer"}, {"p-nap"}),
        ({"kind": "internal"}, {"p-local"}),
        ({"kind": "external"}, {"p-live", "p-overdue", "p-done", "job-1", "job-2"}),
        ({"target": "workers"}, {"job-1"}),
        ({"target": "https://hooks.example"}, {"job-2"}),
        ({"q": "p-"}, {"p-live", "p-overdue", "p-nap", "p-local", "p-done"}),
        ({"q": "job"}, {"job-1", "job-2"}),
        ({"q": "resonate:schedule=nightly"}, {"job-2"}),
        ({"q": f"resonate:target={WORKERS}/1"}, {"job-1"}),
        ({"q": "resonate:schedule=other"}, set()),
        ({"state": "pending", "q": "job-1"}, {"job-1"}),
    ],
)
def test_promise_filters_and_searches(
    varied: None, ro: Client, query: dict[str, str], expected: set[str]
) -> None:
    page = ro.get(changelist(Promise), query)
    assert page.status_code == 200
    assert shown(page) == expected


def test_target_group_choices_come_from_the_targets(varied: None, ro: Client) -> None:
    page = ro.get(changelist(Promise))
    html = page.content.decode()
    assert "?target=workers" in html
    assert "?target=https%3A%2F%2Fhooks.example" in html


def test_the_promise_detail_decodes_values_and_shows_the_call_tree(
    api: Api, ro: Client, T: int
) -> None:
    param = {"data": b64(json.dumps({"order": 7, "items": ["a"]}))}
    api("promise.create", now=T, id="wf", timeoutAt=FAR, tags=TARGET, param=param)
    child = {**EXTERNAL, "resonate:parent": "wf"}
    api("promise.create", now=T, id="wf.1", timeoutAt=FAR, tags=child)
    grandchild = {"resonate:parent": "wf.1"}
    api("promise.create", now=T - 10_000, id="wf.1.1", timeoutAt=T - 1, tags=grandchild)
    api("promise.create", now=T, id="wf.2", timeoutAt=FAR, tags={**child})
    api("promise.settle", now=T, id="wf.2", state="resolved", value={"data": b64("plain text")})
    api("promise.create", now=T, id="wf.3", timeoutAt=FAR, tags={**child})
    api("promise.settle", now=T, id="wf.3", state="rejected", value={"data": b64(b"\xff\x00")})
    api("promise.create", now=T, id="other", timeoutAt=FAR, tags={"resonate:parent": "else"})

    root = ro.get(detail(Promise, "wf")).content.decode()
    assert "data (JSON)" in root
    assert "&quot;order&quot;: 7" in root
    for node in ("wf.1", "wf.1.1", "wf.2", "wf.3"):
        assert f'{detail(Promise, node)}">{node}</a>' in root, node
    assert detail(Promise, "other") not in root
    tree = root[root.index("Call tree") :]
    # The grandchild is internal and past its deadline: projected, never swept.
    assert re.search(r"wf\.1\.1</a> <span[^>]*data-state=\"rejected_timedout\"", tree)
    assert re.search(r"wf\.2</a> <span[^>]*data-state=\"resolved\"", tree)

    leaf = ro.get(detail(Promise, "wf.1.1")).content.decode()
    assert f'{detail(Promise, "wf")}">wf</a>' in leaf  # ancestors up to the root
    assert f'{detail(Promise, "wf.1")}">wf.1</a>' in leaf
    assert "stored pending" in leaf

    text = ro.get(detail(Promise, "wf.2")).content.decode()
    assert "data (text)" in text
    assert "plain text" in text
    binary = ro.get(detail(Promise, "wf.3")).content.decode()
    assert "2 bytes, not UTF-8" in binary


# --- promise actions --------------------------------------------------------------------------


def test_resolving_a_promise_asks_for_a_value_then_settles_it_through_the_handler(
    api: Api, op: Client, operator: User, T: int
) -> None:
    api("promise.create", now=T, id="approval", timeoutAt=FAR, tags=EXTERNAL)

    form = act(op, Promise, "resolve_promises", ["approval"], index="0")
    assert form.templates[0].name == "admin/resonate/action_confirm.html"
    assert 'name="value"' in form.content.decode()
    assert stored("approval").state == "pending"

    before = now_ms()
    done = apply(op, Promise, "resolve_promises", ["approval"], value='{"approved": true}')
    after = now_ms()

    assert done.status_code == 200
    p = stored("approval")
    assert p.state == "resolved"
    assert before <= (p.settled_at or 0) <= after
    assert base64.b64decode(p.value_data or "") == b'{"approved": true}'
    assert "Resolve: approval: resolved" in texts(done)
    assert 'data-state="resolved"' in row(done, "approval")
    record = api("promise.get", now=after, id="approval").data["promise"]
    assert record["state"] == "resolved"
    [entry] = log_of(operator, "approval")
    assert entry.action_flag == CHANGE
    assert "resolved" in entry.get_change_message()


def test_cancelling_a_promise_a_suspended_task_awaits_wakes_the_task(
    api: Api, op: Client, T: int
) -> None:
    start_workflow(api, "wf", T)
    api("promise.create", now=T, id="approval", timeoutAt=FAR, tags=EXTERNAL)
    suspend_on(api, "wf", 1, "approval", T)
    Message.objects.all().delete()
    assert task("wf").state == "suspended"

    page = op.get(detail(Promise, "approval")).content.decode()
    assert 'value="cancel_promises"' in page  # the detail page offers it
    asked = act(op, Promise, "cancel_promises", ["approval"], _return="change")
    assert asked.status_code == 200
    done = apply(op, Promise, "cancel_promises", ["approval"], value="", _return="change")

    assert done.redirect_chain[-1][0] == detail(Promise, "approval")
    assert stored("approval").state == "rejected_canceled"
    assert stored("approval").value_data is None
    woken = task("wf")
    assert (woken.state, woken.version, woken.resumes) == ("pending", 1, ["approval"])
    execute = execute_for("wf")
    assert execute is not None
    assert (execute.version, execute.address) == (1, WORKERS)
    assert api("task.acquire", now=now_ms(), id="wf", version=1, pid="w2", ttl=1000).status == 200


def test_rejecting_an_already_settled_promise_changes_nothing_and_says_so(
    api: Api, op: Client, operator: User, T: int
) -> None:
    api("promise.create", now=T, id="done", timeoutAt=FAR, tags=EXTERNAL)
    api("promise.settle", now=T, id="done", state="resolved", value={"data": b64("first")})

    page = apply(op, Promise, "reject_promises", ["done"], value="second")

    p = stored("done")
    assert (p.state, p.settled_at, base64.b64decode(p.value_data or "")) == (
        "resolved",
        T,
        b"first",
    )
    assert "Reject: nothing to do: done: already resolved" in texts(page)
    assert log_of(operator, "done") == []


def test_settle_buttons_are_offered_only_for_live_promises(api: Api, op: Client, T: int) -> None:
    api("promise.create", now=T - 10_000, id="overdue", timeoutAt=T - 1, tags=EXTERNAL)
    api("promise.create", now=T, id="live", timeoutAt=FAR, tags=EXTERNAL)
    assert "Operator actions" in op.get(detail(Promise, "live")).content.decode()
    assert "Operator actions" not in op.get(detail(Promise, "overdue")).content.decode()


# --- task actions -------------------------------------------------------------------------------


def test_halt_then_continue_a_task(api: Api, op: Client, operator: User, T: int) -> None:
    api("promise.create", now=T, id="job", timeoutAt=FAR, tags=TARGET)
    assert task("job").state == "pending"

    halted = act(op, Task, "halt_tasks", ["job"], _return="change")
    assert halted.redirect_chain[-1][0] == detail(Task, "job")
    assert task("job").state == "halted"
    assert "Halt: job: halted (was pending)" in texts(halted)
    assert 'value="continue_tasks"' in halted.content.decode()
    assert api("task.acquire", now=now_ms(), id="job", version=0, pid="w", ttl=1).status == 409

    Message.objects.all().delete()
    before = now_ms()
    resumed = act(op, Task, "continue_tasks", ["job"], index="0")
    t = task("job")
    assert t.state == "pending"
    assert (t.retry_at or 0) >= before + 5_000  # dispatched at once, retry re-armed
    execute = execute_for("job")
    assert execute is not None
    assert execute.version == 0
    assert "Continue: job: continued: pending, dispatched" in texts(resumed)
    assert [e.get_change_message() for e in log_of(operator, "job")] == [
        "Halt from the admin: halted (was pending)",
        "Continue from the admin: continued: pending, dispatched",
    ]


def test_halting_a_fulfilled_task_is_refused_and_reported(
    api: Api, op: Client, operator: User, T: int
) -> None:
    api("promise.create", now=T, id="job", timeoutAt=FAR, tags=TARGET)
    api("promise.settle", now=T, id="job", state="resolved")

    page = act(op, Task, "halt_tasks", ["job"], index="0")

    assert task("job").state == "fulfilled"
    assert "Halt: job: refused (409 task is fulfilled)" in texts(page)
    assert log_of(operator, "job") == []


def test_continuing_a_task_that_is_not_halted_is_refused(api: Api, op: Client, T: int) -> None:
    start_workflow(api, "wf", T)
    page = act(op, Task, "continue_tasks", ["wf"], index="0")
    assert task("wf").state == "acquired"
    assert "Continue: wf: refused (409 task is not halted)" in texts(page)


def test_expiring_a_lease_redispatches_the_task_and_fences_out_the_holder(
    api: Api, op: Client, operator: User, T: int
) -> None:
    start_workflow(api, "wf", T, pid="worker-1")
    Message.objects.all().delete()

    asked = act(op, Task, "expire_leases", ["wf"], _return="change")
    assert "worker-1" in asked.content.decode()  # the confirmation names the holder
    assert task("wf").state == "acquired"

    done = apply(op, Task, "expire_leases", ["wf"], _return="change")

    t = task("wf")
    assert (t.state, t.version, t.pid, t.expires_at) == ("pending", 1, None, None)
    execute = execute_for("wf")
    assert execute is not None
    assert execute.version == 1
    assert "Expire lease: wf: lease expired (was worker-1): pending at version 1" in texts(done)
    now = now_ms()
    assert fulfill(api, "wf", 1, now) == 409  # the old holder: no longer acquired
    assert (
        api("task.acquire", now=now, id="wf", version=1, pid="worker-2", ttl=60_000).status == 200
    )
    assert fulfill(api, "wf", 1, now) == 409  # and now an old version
    assert fulfill(api, "wf", 2, now) == 200  # the new holder
    [entry] = log_of(operator, "wf")
    assert "lease expired" in entry.get_change_message()


def test_expiring_the_lease_of_a_task_past_its_deadline_times_its_promise_out(
    api: Api, op: Client, T: int
) -> None:
    start_workflow(api, "wf", T - 10_000, timeout_at=T - 5_000)
    assert task("wf").state == "acquired"  # stored; viewed as fulfilled since T - 5000

    page = apply(op, Task, "expire_leases", ["wf"])

    p = stored("wf")
    assert (p.state, p.settled_at) == ("rejected_timedout", T - 5_000)
    assert task("wf").state == "fulfilled"
    assert execute_for("wf") is None
    assert any("timed out as rejected_timedout, task fulfilled" in m for m in texts(page))


def test_expiring_the_lease_of_a_task_not_acquired_is_refused(api: Api, op: Client, T: int) -> None:
    api("promise.create", now=T, id="job", timeoutAt=FAR, tags=TARGET)
    page = apply(op, Task, "expire_leases", ["job"])
    assert task("job").state == "pending"
    assert "Expire lease: job: refused (409 task is pending, not acquired)" in texts(page)


def test_task_list_shows_viewed_states_and_filters(api: Api, ro: Client, T: int) -> None:
    start_workflow(api, "held", T)
    start_workflow(api, "stuck", T - 120_000)  # its 60 s lease ran out a minute ago
    start_workflow(api, "dead", T - 10_000, timeout_at=T - 5_000)
    api("promise.create", now=T, id="queued", timeoutAt=FAR, tags=TARGET)

    page = ro.get(changelist(Task))
    assert 'data-state="fulfilled"' in row(page, "dead")  # stored acquired
    assert 'data-state="acquired"' in row(page, "stuck")
    assert shown(ro.get(changelist(Task), {"state": "fulfilled"})) == {"dead"}
    assert shown(ro.get(changelist(Task), {"state": "acquired"})) == {"held", "stuck"}
    assert shown(ro.get(changelist(Task), {"state": "pending"})) == {"queued"}
    assert shown(ro.get(changelist(Task), {"lease": "expired"})) == {"stuck"}
    assert shown(ro.get(changelist(Task), {"lease": "held"})) == {"held", "dead"}
    assert shown(ro.get(changelist(Task), {"q": "worker-1"})) == {"held", "stuck", "dead"}
    assert shown(ro.get(changelist(Task), {"q": "st"})) == {"stuck"}
    assert shown(ro.get(changelist(Task), {"target": "workers"})) == {
        "held",
        "stuck",
        "dead",
        "queued",
    }
    html = ro.get(detail(Task, "held")).content.decode()
    assert "worker-1" in html
    assert ms_datetime(T + 60_000) in html  # the lease deadline


# --- outbox -------------------------------------------------------------------------------------


def test_resend_makes_a_failing_message_due_now(
    api: Api, op: Client, operator: User, T: int
) -> None:
    api(
        "promise.create",
        now=T,
        id="job",
        timeoutAt=FAR,
        tags={"resonate:target": "https://w.example"},
    )
    Message.objects.filter(key="job").update(
        attempts=4, last_error="connection refused", next_attempt_at=FAR
    )
    revision = Message.objects.get(key="job").revision

    listing = op.get(changelist(Message), {"failing": "yes"})
    assert shown(listing) == {"job"}
    assert "connection refused" in row(listing, "job")
    assert claim(Q(key="job"), now_ms(), 10) == []  # backing off

    before = now_ms()
    page = act(op, Message, "resend_messages", ["job"], _return="change")
    after = now_ms()

    m = Message.objects.get(key="job")
    assert before <= m.next_attempt_at <= after
    assert (m.attempts, m.last_error, m.revision) == (0, "", revision + 1)
    assert (m.kind, m.task_id, m.version, m.address) == ("execute", "job", 0, "https://w.example")
    assert page.redirect_chain[-1][0] == detail(Message, "job")
    assert "Re-send: job: due now (was: 4 attempts)" in texts(page)
    assert [c.key for c in claim(Q(key="job"), now_ms(), 10)] == ["job"]
    assert len(log_of(operator, "job")) == 1


def test_resending_a_message_already_delivered_is_reported(api: Api, op: Client, T: int) -> None:
    api("promise.create", now=T, id="job", timeoutAt=FAR, tags=TARGET)
    assert shown(op.get(changelist(Message))) == {"job"}
    Message.objects.all().delete()  # delivered while the operator looked at the list

    page = act(op, Message, "resend_messages", ["job"], index="0")

    assert Message.objects.count() == 0  # nothing is re-created
    assert "Re-send: the selected messages no longer exist (delivered, or deleted meanwhile)" in (
        texts(page)
    )
    with pytest.raises(NotFound):
        resend(key="job", now=now_ms())


def test_outbox_list_shows_age_and_due(api: Api, ro: Client, T: int) -> None:
    api("promise.create", now=T - 90_000, id="old", timeoutAt=FAR, tags=TARGET)
    page = ro.get(changelist(Message))
    assert re.search(r"1m 3\ds", row(page, "old"))
    assert ">due<" in row(page, "old")
    assert shown(ro.get(changelist(Message), {"due": "now"})) == {"old"}
    assert shown(ro.get(changelist(Message), {"transport": "push"})) == set()
    assert shown(ro.get(changelist(Message), {"q": "poll://any@"})) == {"old"}
    html = ro.get(detail(Message, "old")).content.decode()
    assert "&quot;kind&quot;: &quot;execute&quot;" in html


# --- schedules ----------------------------------------------------------------------------------


def nightly(api: Api, T: int, template: str = "nightly-{{.timestamp}}") -> Schedule:
    res = api(
        "schedule.create",
        now=T,
        id="nightly",
        cron="0 3 * * *",
        promiseId=template,
        promiseTimeout=60_000,
        promiseTags={"resonate:target": "poll://any@reports"},
        promiseParam={"data": b64('{"report": "daily"}')},
    )
    assert res.status == 200, res.data
    return Schedule.objects.get(pk="nightly")


def test_fire_now_creates_the_occurrence_and_keeps_the_cadence(
    api: Api, op: Client, operator: User, T: int
) -> None:
    s = nightly(api, T)

    before = now_ms()
    page = act(op, Schedule, "fire_schedules", ["nightly"], _return="change")
    after = now_ms()

    s2 = Schedule.objects.get(pk="nightly")
    assert s2.next_run_at == s.next_run_at
    fired = s2.last_run_at
    assert fired is not None
    assert before <= fired <= after
    p = stored(f"nightly-{fired}")
    assert (p.created_at, p.timeout_at, p.state) == (fired, fired + 60_000, "pending")
    assert p.tags["resonate:schedule"] == "nightly"
    assert p.tags["resonate:parent"] == p.id
    assert p.param_data == b64('{"report": "daily"}')
    assert task(p.id).state == "pending"
    execute = execute_for(p.id)
    assert execute is not None
    assert execute.address == "poll://any@reports"
    assert f"Fire now: nightly: fired: created {p.id}" in texts(page)
    html = page.content.decode()
    assert f'{detail(Promise, p.id)}">{p.id}</a>' in html  # among its occurrences
    assert len(log_of(operator, "nightly")) == 1


def test_fire_now_with_a_fixed_occurrence_id_does_not_create_it_twice(
    api: Api, op: Client, T: int
) -> None:
    nightly(api, T, template="nightly-once")
    act(op, Schedule, "fire_schedules", ["nightly"], index="0")
    page = act(op, Schedule, "fire_schedules", ["nightly"], index="0")
    assert Promise.objects.filter(id="nightly-once").count() == 1
    assert "Fire now: nothing to do: nightly: occurrence nightly-once already exists" in texts(page)


def test_schedule_pages_show_cron_in_words_and_the_next_fire_times(
    api: Api, ro: Client, T: int
) -> None:
    s = nightly(api, T)
    listing = ro.get(changelist(Schedule))
    assert "At 03:00 (UTC)" in row(listing, "nightly")
    html = ro.get(detail(Schedule, "nightly")).content.decode()
    day = 86_400_000
    for i in range(5):
        assert ms_datetime(s.next_run_at + i * day) in html
    assert "03:00:00.000 UTC" in ms_datetime(s.next_run_at)
    assert "&quot;report&quot;: &quot;daily&quot;" in html  # the param, decoded


def test_delete_schedule_asks_then_deletes_through_the_handler(
    api: Api, op: Client, operator: User, T: int
) -> None:
    nightly(api, T)
    act(op, Schedule, "fire_schedules", ["nightly"], index="0")
    occurrences = set(
        Promise.objects.filter(id__startswith="nightly-").values_list("id", flat=True)
    )

    asked = act(op, Schedule, "delete_schedules", ["nightly"], _return="change")
    assert "At 03:00" in asked.content.decode()
    assert Schedule.objects.filter(pk="nightly").exists()

    done = apply(op, Schedule, "delete_schedules", ["nightly"], _return="change")

    assert not Schedule.objects.filter(pk="nightly").exists()
    assert done.redirect_chain[-1][0] == changelist(Schedule)
    assert api("schedule.get", now=now_ms(), id="nightly").status == 404
    assert set(Promise.objects.filter(id__startswith="nightly-").values_list("id", flat=True)) == (
        occurrences
    )
    assert [e.action_flag for e in log_of(operator, "nightly")] == [CHANGE, DELETION]


# --- permissions --------------------------------------------------------------------------------


def test_a_viewer_cannot_act(api: Api, ro: Client, viewer: User, T: int) -> None:
    api("promise.create", now=T, id="approval", timeoutAt=FAR, tags=EXTERNAL)
    start_workflow(api, "wf", T)
    nightly(api, T)
    api("promise.create", now=T, id="job", timeoutAt=FAR, tags=TARGET)
    Message.objects.filter(key="job").update(next_attempt_at=FAR, attempts=3)

    attempts = [
        (Promise, "resolve_promises", "approval"),
        (Promise, "cancel_promises", "approval"),
        (Task, "halt_tasks", "wf"),
        (Task, "expire_leases", "wf"),
        (Schedule, "fire_schedules", "nightly"),
        (Schedule, "delete_schedules", "nightly"),
        (Message, "resend_messages", "job"),
    ]
    for model, action, pk in attempts:
        for step in (act, apply):
            page = step(ro, model, action, [pk], index="0")
            assert page.status_code == 200
            assert page.context["action_form"] is None
        assert "Operator actions" not in ro.get(detail(model, pk)).content.decode()

    assert stored("approval").state == "pending"
    assert task("wf").state == "acquired"
    assert Schedule.objects.get(pk="nightly").last_run_at is None
    assert Message.objects.get(key="job").next_attempt_at == FAR
    assert not LogEntry.objects.filter(user=viewer).exists()


def test_an_operator_is_offered_exactly_the_actions_of_each_app(op: Client, db: Any) -> None:
    offered = {
        model: {
            name
            for name, _ in op.get(changelist(model)).context["action_form"].fields["action"].choices
        }
        for model in MODELS
    }
    assert offered == {
        Promise: {"", "resolve_promises", "reject_promises", "cancel_promises"},
        Task: {"", "halt_tasks", "continue_tasks", "expire_leases"},
        Schedule: {"", "fire_schedules", "delete_schedules"},
        Message: {"", "resend_messages", "purge_messages"},
    }


def test_acting_needs_the_apps_own_permission(api: Api, T: int) -> None:
    promise_only = staff("promise-operator", [*VIEW, "act_on_promise"])
    client = logged_in(promise_only)
    start_workflow(api, "wf", T)
    page = act(client, Task, "halt_tasks", ["wf"], index="0")
    assert page.context["action_form"] is None
    assert task("wf").state == "acquired"
    assert client.get(changelist(Promise)).context["action_form"] is not None
