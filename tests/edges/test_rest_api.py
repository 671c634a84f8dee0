"""The resource API under /api/: filters, cursor pagination, every write, the error shape, 404s,
reads that write nothing, authentication, the schema and docs, and a schemathesis run over the
live schema (POST / included) that must never meet a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import schemathesis
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Ok

from promises.models import Promise
from resonate_project.access.credentials import credential_create
from resonate_project.edges.kinds import KINDS
from tasks_app.models import Task
from tests.support.factories import FAR, Api

TARGET = "resonate:target"
ADDRESS = "poll://any@workers"
DEAD = 5_000  # a deadline long past when the API reads the wall clock


def get(client: Client, url: str, **params: Any) -> tuple[int, Any]:
    res = client.get(url, params)
    return res.status_code, res.json()


def post(client: Client, url: str, body: Any = None) -> tuple[int, Any]:
    res = client.post(url, json.dumps(body) if body is not None else "", "application/json")
    return res.status_code, (res.json() if res.content else None)


def ids(page: dict[str, Any]) -> list[str]:
    return [r["id"] for r in page["results"]]


def error(body: Any) -> tuple[int, str | None]:
    """The error shape, checked whole; returns (status, field)."""
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"status", "message", "field"}, body
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    return body["error"]["status"], body["error"]["field"]


def create(
    api: Api, id: str, tags: dict[str, str] | None = None, *, now: int = 1_000, timeout: int = FAR
) -> None:
    assert api("promise.create", now=now, id=id, timeoutAt=timeout, tags=tags or {}).ok


# --- reads: pagination and filters --------------------------------------------------------------


def test_lists_are_ordered_by_id_and_paged_with_a_cursor(api: Api, client: Client) -> None:
    for i in (3, 0, 4, 1, 2):
        create(api, f"p{i}")
    status, page = get(client, "/api/promises", limit=2)
    assert status == 200
    assert ids(page) == ["p0", "p1"]
    assert page["previous"] is None
    seen = ids(page)
    while page["next"]:
        status, page = get(client, page["next"])
        assert status == 200
        seen += ids(page)
    assert seen == ["p0", "p1", "p2", "p3", "p4"]
    status, back = get(client, page["previous"])
    assert ids(back) == ["p2", "p3"]


def test_the_page_size_defaults_to_the_search_default(api: Api, client: Client) -> None:
    for i in range(3):
        create(api, f"p{i}")
    _, page = get(client, "/api/promises")
    assert ids(page) == ["p0", "p1", "p2"]
    assert page["next"] is None


def test_records_and_the_state_filter_use_the_projected_state(api: Api, client: Client) -> None:
    create(api, "live")
    create(api, "dead", timeout=DEAD)
    create(api, "timer", {"resonate:timer": "true"}, timeout=DEAD)
    assert api("promise.create", id="settled", timeoutAt=FAR).ok
    assert api("promise.settle", now=2_000, id="settled", state="rejected").ok

    _, dead = get(client, "/api/promises/dead")
    assert (dead["state"], dead["settledAt"]) == ("rejected_timedout", DEAD)
    by_state = {
        state: ids(get(client, "/api/promises", state=state)[1])
        for state in ("pending", "resolved", "rejected", "rejected_timedout", "rejected_canceled")
    }
    assert by_state == {
        "pending": ["live"],
        "resolved": ["timer"],
        "rejected": ["settled"],
        "rejected_timedout": ["dead"],
        "rejected_canceled": [],
    }


def test_the_tag_filter_matches_every_given_tag_exactly(api: Api, client: Client) -> None:
    create(api, "a", {TARGET: ADDRESS, "team": "x"})
    create(api, "b", {TARGET: ADDRESS, "team": "y"})
    create(api, "c", {TARGET: "poll://any@other", "team": "x"})
    create(api, "d", {"url": "http://h/?q=1"})
    assert ids(get(client, "/api/promises", tag=f"{TARGET}={ADDRESS}")[1]) == ["a", "b"]
    both = client.get(f"/api/promises?tag={quote(f'{TARGET}={ADDRESS}')}&tag=team%3Dx").json()
    assert ids(both) == ["a"]
    assert ids(get(client, "/api/promises", tag="url=http://h/?q=1")[1]) == ["d"]
    assert ids(get(client, "/api/promises", tag="team=")[1]) == []


def test_the_id_prefix_filter(api: Api, client: Client) -> None:
    for id in ("order.1", "order.2", "orders", "other"):
        create(api, id)
    assert ids(get(client, "/api/promises", idPrefix="order.")[1]) == ["order.1", "order.2"]


def test_time_ranges_are_half_open_and_settled_is_projected(api: Api, client: Client) -> None:
    create(api, "t1", now=1_000, timeout=FAR)
    create(api, "t2", now=2_000, timeout=DEAD)
    create(api, "t3", now=3_000, timeout=FAR - 1)
    assert api("promise.settle", now=6_000, id="t3", state="resolved").ok

    def q(**params: int) -> list[str]:
        return ids(get(client, "/api/promises", **params)[1])

    assert q(createdAfter=2_000) == ["t2", "t3"]
    assert q(createdBefore=2_000) == ["t1"]
    assert q(createdAfter=1_500, createdBefore=3_000) == ["t2"]
    assert q(timeoutBefore=FAR) == ["t2", "t3"]
    assert q(timeoutAfter=FAR) == ["t1"]
    # t2 is stored pending but reads as settled at its deadline.
    assert q(settledAfter=DEAD, settledBefore=DEAD + 1) == ["t2"]
    assert q(settledBefore=DEAD) == []
    assert q(settledAfter=DEAD + 1) == ["t3"]
    assert q(settledAfter=0) == ["t2", "t3"]


@pytest.mark.parametrize(
    "param", ["createdAfter", "timeoutBefore", "settledAfter", "settledBefore"]
)
def test_instants_beyond_64_bits_filter_instead_of_failing(
    api: Api, client: Client, param: str
) -> None:
    create(api, "p", timeout=DEAD)
    status, page = get(client, "/api/promises", **{param: str(10**30)})
    assert status == 200
    assert ids(page) == ([] if param.endswith("After") else ["p"])


def test_task_filters_use_the_viewed_state_and_the_promise(api: Api, client: Client) -> None:
    create(api, "job.live", {TARGET: ADDRESS})
    create(api, "job.dead", {TARGET: ADDRESS}, timeout=DEAD)
    create(api, "other", {TARGET: "poll://any@elsewhere"})
    assert ids(get(client, "/api/tasks")[1]) == ["job.dead", "job.live", "other"]
    _, fulfilled = get(client, "/api/tasks", state="fulfilled")
    assert fulfilled["results"] == [
        {"id": "job.dead", "state": "fulfilled", "version": 0, "resumes": 0, "releases": 0}
    ]
    assert ids(get(client, "/api/tasks", state="pending")[1]) == ["job.live", "other"]
    assert ids(get(client, "/api/tasks", tag=f"{TARGET}={ADDRESS}")[1]) == ["job.dead", "job.live"]
    assert ids(get(client, "/api/tasks", idPrefix="job.", state="pending")[1]) == ["job.live"]
    assert ids(get(client, "/api/tasks", timeoutBefore=FAR)[1]) == ["job.dead"]
    assert Task.objects.get(promise_id="job.dead").state == "pending"  # viewed, not written


def test_schedule_filters(api: Api, client: Client) -> None:
    for id, cron, team in (("s.hourly", "0 * * * *", "x"), ("s.daily", "0 0 * * *", "y")):
        res = api(
            "schedule.create",
            id=id,
            cron=cron,
            promiseId="{{.id}}.{{.timestamp}}",
            promiseTimeout=60_000,
            promiseTags={"team": team},
        )
        assert res.ok
    assert ids(get(client, "/api/schedules")[1]) == ["s.daily", "s.hourly"]
    assert ids(get(client, "/api/schedules", tag="team=x")[1]) == ["s.hourly"]
    assert ids(get(client, "/api/schedules", idPrefix="s.d")[1]) == ["s.daily"]
    assert ids(get(client, "/api/schedules", nextRunBefore=3_600_001)[1]) == ["s.hourly"]
    assert ids(get(client, "/api/schedules", nextRunAfter=3_600_001)[1]) == ["s.daily"]


# --- reads: details and 404s --------------------------------------------------------------------


def test_details_serve_the_protocol_records(api: Api, client: Client) -> None:
    create(api, "a/b c", {TARGET: ADDRESS})
    assert api("schedule.create", id="s/1", cron="* * * * *", promiseId="x", promiseTimeout=1).ok
    status, promise = get(client, "/api/promises/" + quote("a/b c"))
    assert status == 200
    assert promise == api("promise.get", now=1_000, id="a/b c").data["promise"]
    status, task = get(client, "/api/tasks/" + quote("a/b c"))
    assert (status, task["state"], task["version"]) == (200, "pending", 0)
    status, schedule = get(client, "/api/schedules/s/1")
    assert (status, schedule["cron"]) == (200, "* * * * *")


@pytest.mark.parametrize(
    "url", ["/api/promises/nope", "/api/tasks/nope", "/api/schedules/nope", "/api/nothing"]
)
def test_missing_resources_answer_404_in_the_error_shape(db: Any, client: Client, url: str) -> None:
    res = client.get(url)
    assert res.status_code == 404
    assert error(res.json()) == (404, None)


def test_a_promise_without_a_task_has_no_task_resource(api: Api, client: Client) -> None:
    create(api, "plain")
    status, body = get(client, "/api/tasks/plain")
    assert (status, error(body)) == (404, (404, None))


def test_reads_write_nothing(api: Api, client: Client) -> None:
    create(api, "dead", {TARGET: ADDRESS}, timeout=DEAD)
    urls = [
        "/api/promises",
        "/api/promises?state=rejected_timedout&settledAfter=0",
        "/api/promises/dead",
        "/api/tasks?state=fulfilled",
        "/api/tasks/dead",
        "/api/schedules",
    ]
    with CaptureQueriesContext(connection) as queries:
        for url in urls:
            assert client.get(url).status_code == 200
    statements = [q["sql"].lstrip().split(None, 1)[0].upper() for q in queries.captured_queries]
    assert set(statements) <= {"SELECT"}, statements
    assert Promise.objects.get(id="dead").state == "pending"
    assert Task.objects.get(promise_id="dead").state == "pending"


# --- writes -------------------------------------------------------------------------------------


def test_create_a_promise_is_idempotent_by_id(db: Any, client: Client) -> None:
    body = {"id": "p", "timeoutAt": FAR, "param": {"data": "e30="}, "tags": {"k": "v"}}
    status, first = post(client, "/api/promises", body)
    assert status == 200
    assert first["state"] == "pending"
    assert (first["param"], first["tags"], first["timeoutAt"]) == (
        {"data": "e30="},
        {"k": "v"},
        FAR,
    )
    status, again = post(client, "/api/promises", {**body, "tags": {"other": "x"}})
    assert (status, again) == (200, first)


def test_a_targeted_create_makes_a_task_due(db: Any, client: Client) -> None:
    status, _ = post(
        client, "/api/promises", {"id": "job", "timeoutAt": FAR, "tags": {TARGET: ADDRESS}}
    )
    assert status == 200
    _, task = get(client, "/api/tasks/job")
    assert (task["state"], task["version"]) == ("pending", 0)
    from outbox.models import Message

    assert Message.objects.filter(kind="execute", task_id="job").count() == 1


def test_settle_a_promise_first_verdict_wins(api: Api, client: Client) -> None:
    create(api, "p")
    status, record = post(
        client, "/api/promises/p/settle", {"state": "resolved", "value": {"data": "MQ=="}}
    )
    assert (status, record["state"], record["value"]) == (200, "resolved", {"data": "MQ=="})
    status, record = post(client, "/api/promises/p/settle", {"state": "rejected"})
    assert (status, record["state"]) == (200, "resolved")


def test_settle_refusals(api: Api, client: Client) -> None:
    create(api, "p")
    status, body = post(client, "/api/promises/nope/settle", {"state": "resolved"})
    assert (status, error(body)) == (404, (404, None))
    status, body = post(client, "/api/promises/p/settle", {"state": "pending"})
    assert (status, error(body)) == (400, (400, "state"))
    status, body = post(client, "/api/promises/p/settle", {})
    assert (status, error(body)) == (400, (400, "state"))


def test_halt_and_continue_a_task(api: Api, client: Client) -> None:
    create(api, "job", {TARGET: ADDRESS})
    status, task = post(client, "/api/tasks/job/halt")
    assert (status, task["state"]) == (200, "halted")
    status, task = post(client, "/api/tasks/job/halt")
    assert (status, task["state"]) == (200, "halted")
    status, task = post(client, "/api/tasks/job/continue")
    assert (status, task["state"]) == (200, "pending")
    status, body = post(client, "/api/tasks/job/continue")
    assert (status, error(body)) == (409, (409, None))
    status, body = post(client, "/api/tasks/nope/halt")
    assert (status, error(body)) == (404, (404, None))


def test_halting_a_fulfilled_task_is_refused(api: Api, client: Client) -> None:
    create(api, "job", {TARGET: ADDRESS}, timeout=DEAD)
    status, body = post(client, "/api/tasks/job/halt")
    assert (status, error(body)) == (409, (409, None))


def test_create_and_delete_a_schedule(db: Any, client: Client) -> None:
    body = {
        "id": "nightly",
        "cron": "0 3 * * *",
        "promiseId": "{{.id}}.{{.timestamp}}",
        "promiseTimeout": 3_600_000,
        "promiseTags": {TARGET: ADDRESS},
    }
    status, schedule = post(client, "/api/schedules", body)
    assert status == 200
    assert (schedule["id"], schedule["cron"], schedule["promiseTags"]) == (
        "nightly",
        "0 3 * * *",
        {TARGET: ADDRESS},
    )
    assert schedule["nextRunAt"] % 86_400_000 == 3 * 3_600_000
    status, again = post(client, "/api/schedules", {**body, "cron": "* * * * *"})
    assert (status, again) == (200, schedule)
    res = client.delete("/api/schedules/nightly")
    assert (res.status_code, res.content) == (204, b"")
    assert client.get("/api/schedules/nightly").status_code == 404
    res = client.delete("/api/schedules/nightly")
    assert (res.status_code, error(res.json())) == (404, (404, None))


def test_an_invalid_cron_is_refused_naming_the_field(db: Any, client: Client) -> None:
    body = {"id": "s", "cron": "every day", "promiseId": "x", "promiseTimeout": 1}
    status, res = post(client, "/api/schedules", body)
    assert (status, error(res)) == (400, (400, "cron"))


# --- the error shape ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"id": "p"}, "timeoutAt"),
        ({"id": "p", "timeoutAt": "soon"}, "timeoutAt"),
        ({"id": "p", "timeoutAt": "100"}, "timeoutAt"),
        ({"id": "p", "timeoutAt": 1.5}, "timeoutAt"),
        ({"id": 7, "timeoutAt": 1}, "id"),
        ({"id": "p", "timeoutAt": -1}, "timeoutAt"),
        ({"id": "", "timeoutAt": 1}, "id"),
        ({"id": "p" * 1025, "timeoutAt": 1}, "id"),
        ({"id": "é" * 600, "timeoutAt": 1}, "id"),  # 1200 bytes: the protocol's check
        ({"id": "p", "timeoutAt": 1, "param": {"headers": {"a": ["b"]}}}, "param.headers.a"),
        ({"id": "p", "timeoutAt": 1, "tags": {"k": 1.5}}, "tags.k"),
        ({"id": "p", "timeoutAt": 1, "tags": "k=v"}, "tags"),
        ({"id": "p\x00", "timeoutAt": 1}, "id"),
        (["p"], None),
    ],
)
def test_invalid_bodies_are_400_naming_the_field(
    db: Any, client: Client, body: Any, field: str | None
) -> None:
    status, res = post(client, "/api/promises", body)
    assert (status, error(res)) == (400, (400, field))
    assert not Promise.objects.exists()


@pytest.mark.parametrize(
    ("url", "params", "field"),
    [
        ("/api/promises", {"state": "done"}, "state"),
        ("/api/promises", {"tag": "no-equals"}, "tag"),
        ("/api/promises", {"tag": "=v"}, "tag"),
        ("/api/promises", {"tag": "k=\x00"}, "tag"),
        ("/api/promises", {"createdAfter": "yesterday"}, "createdAfter"),
        ("/api/promises", {"settledBefore": "1.5"}, "settledBefore"),
        ("/api/promises", {"idPrefix": "a\x00"}, "idPrefix"),
        ("/api/promises", {"limit": "0"}, "limit"),
        ("/api/promises", {"limit": "1001"}, "limit"),
        ("/api/promises", {"limit": "ten"}, "limit"),
        ("/api/promises", {"cursor": "not-a-cursor"}, "cursor"),
        ("/api/tasks", {"state": "resolved"}, "state"),
        ("/api/schedules", {"tag": "k"}, "tag"),
    ],
)
def test_invalid_queries_are_400_naming_the_parameter(
    db: Any, client: Client, url: str, params: dict[str, str], field: str
) -> None:
    status, res = get(client, url, **params)
    assert (status, error(res)) == (400, (400, field))


def test_unparseable_json_and_other_http_errors_keep_the_shape(db: Any, client: Client) -> None:
    res = client.post("/api/promises", "{nope", "application/json")
    assert (res.status_code, error(res.json())) == (400, (400, None))
    res = client.post("/api/promises", "id=p", "application/x-www-form-urlencoded")
    assert (res.status_code, error(res.json())) == (415, (415, None))
    res = client.put("/api/promises/p", "{}", "application/json")
    assert (res.status_code, error(res.json())) == (405, (405, None))
    res = client.get("/api/tasks/p/halt")
    assert (res.status_code, error(res.json())) == (405, (405, None))


# --- authentication -----------------------------------------------------------------------------


@pytest.fixture
def token(db: Any) -> Iterator[str]:
    """A service credential, with RESONATE_AUTH=required (tests/security has the full matrix)."""
    with override_settings(RESONATE={"AUTH": "required"}):
        yield credential_create(name="api-tests", now=1)[1]


def test_without_auth_required_the_api_is_open(api: Api, client: Client) -> None:
    assert client.get("/api/promises").status_code == 200


def test_with_auth_required_a_request_needs_a_credential(
    api: Api, client: Client, token: str
) -> None:
    res = client.get("/api/promises")
    assert (res.status_code, error(res.json())) == (401, (401, None))
    assert res["WWW-Authenticate"].startswith("Bearer")
    res = client.get("/api/promises", HTTP_AUTHORIZATION="Bearer wrong")
    assert (res.status_code, error(res.json())) == (401, (401, None))
    res = client.get("/api/promises", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert res.status_code == 200
    res = client.post(
        "/api/promises",
        json.dumps({"id": "p", "timeoutAt": FAR}),
        "application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert (res.status_code, res.json()["id"]) == (200, "p")


def test_with_auth_required_a_staff_session_is_let_in(api: Api, client: Client, token: str) -> None:
    user = User.objects.create_user("ops", password="pw")
    client.force_login(user)
    assert client.get("/api/promises").status_code == 403
    user.is_staff = True
    user.save()
    assert client.get("/api/promises").status_code == 403  # staff, but no view_promise
    user.user_permissions.add(Permission.objects.get(codename="view_promise"))
    client.force_login(User.objects.get(pk=user.pk))
    assert client.get("/api/promises").status_code == 200


def test_the_schema_and_docs_are_public_without_auth(db: Any, client: Client) -> None:
    assert client.get("/api/schema/").status_code == 200
    assert client.get("/api/docs/").status_code == 200


# --- schema and docs ----------------------------------------------------------------------------


def test_the_schema_documents_the_resources_and_the_envelope(db: Any, client: Client) -> None:
    res = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    schema = res.json()
    assert schema["openapi"].startswith("3.")
    assert {
        "/",
        "/api/promises",
        "/api/promises/{id}",
        "/api/promises/{id}/settle",
        "/api/tasks",
        "/api/tasks/{id}",
        "/api/tasks/{id}/halt",
        "/api/tasks/{id}/continue",
        "/api/schedules",
        "/api/schedules/{id}",
    } <= set(schema["paths"])
    kinds = schema["components"]["schemas"]["Envelope"]["properties"]["kind"]["enum"]
    assert kinds == list(KINDS)  # the registry, in its order
    params = {p["name"] for p in schema["paths"]["/api/promises"]["get"]["parameters"]}
    assert params == {
        "state",
        "tag",
        "idPrefix",
        "createdAfter",
        "createdBefore",
        "timeoutAfter",
        "timeoutBefore",
        "settledAfter",
        "settledBefore",
        "cursor",
        "limit",
    }


def test_swagger_ui_is_served_without_a_cdn(db: Any, client: Client) -> None:
    page = client.get("/api/docs/").content.decode()
    assert "https://" not in page
    assert "http://" not in page
    assets = [
        a for a in ("swagger-ui.css", "swagger-ui-bundle.js") if f"/api/docs/assets/{a}" in page
    ]
    assert assets == ["swagger-ui.css", "swagger-ui-bundle.js"]
    for asset in assets:
        res = client.get(f"/api/docs/assets/{asset}")
        assert res.status_code == 200
        assert res.getvalue()
    assert client.get("/api/docs/assets/..%2Fsettings.py").status_code == 404


# --- schemathesis over the live schema ----------------------------------------------------------

EXAMPLES = 25  # per operation and generation mode: about 650 requests, well under a minute


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_generated_input_makes_a_server_error(live_server: Any, mode: GenerationMode) -> None:
    """Every operation of the served schema, POST / included, with inputs that fit the schema
    (positive) and inputs that break it (negative): never a 5xx."""
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/schema/")
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result
        operations.append(result.ok())
    assert {op.path for op in operations} >= {"/", "/api/promises", "/api/tasks/{id}/halt"}
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def never_a_server_error(case: Any) -> None:
            case.call_and_validate(base_url=live_server.url, checks=[not_a_server_error])

        never_a_server_error()
