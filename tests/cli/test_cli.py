"""``manage.py resonate``: every subcommand on the local database (human and --json output), and
the same commands against a running server with --server."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from promises.models import Promise
from resonate_project.core.clock import now_ms
from resonate_project.edges import cli
from schedules.models import Schedule
from tasks_app.models import Task
from tests.support.factories import FAR, Api

TARGET = "resonate:target"


def resonate(*args: str) -> str:
    out = StringIO()
    call_command("resonate", *args, stdout=out)
    return out.getvalue()


def as_json(*args: str) -> Any:
    return json.loads(resonate(*args, "--json"))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def columns(line: str) -> list[int]:
    """Where each column of an aligned table line starts."""
    starts, previous = [], " "
    for i, ch in enumerate(line):
        if ch != " " and previous == " " and (i == 0 or line[i - 2 : i] == "  "):
            starts.append(i)
        previous = ch
    return starts


# --- durations ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("10s", 10_000),
        ("30m", 1_800_000),
        ("1h", 3_600_000),
        ("1h30m", 5_400_000),
        ("2d", 172_800_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert cli.duration(text) == ms


@pytest.mark.parametrize("text", ["", "10", "1x", "h", "1.5h", "1s-", "1h 30m"])
def test_bad_durations_are_refused(db: Any, text: str) -> None:
    with pytest.raises(CommandError, match="duration"):
        resonate("promises", "create", "p", "--timeout", text)
    assert not Promise.objects.exists()


# --- promises -----------------------------------------------------------------------------------


def test_create_then_get_a_promise(db: Any) -> None:
    before = now_ms()
    out = resonate(
        "promises",
        "create",
        "p1",
        "--timeout",
        "1h",
        "--data",
        "hello",
        "--header",
        "h=1",
        "--tag",
        "team=x",
    )
    after = now_ms()
    p = Promise.objects.get(id="p1")
    assert before + 3_600_000 <= p.timeout_at <= after + 3_600_000
    assert (p.param_data, p.param_headers, p.tags) == (b64("hello"), {"h": "1"}, {"team": "x"})
    lines = out.splitlines()
    assert lines[0].split() == ["id", "p1"]
    assert lines[1].split() == ["state", "pending"]
    assert "hello  (headers: h=1)" in out
    assert "team=x" in out
    assert "UTC (in 59m" in out or "UTC (in 1h" in out
    # label column aligned
    assert len({line.index(line.split()[1]) for line in lines if not line.startswith(" ")}) == 1

    record = as_json("promises", "get", "p1")["promise"]
    assert (record["id"], record["state"], record["param"]["data"]) == (
        "p1",
        "pending",
        b64("hello"),
    )
    assert resonate("promises", "get", "p1").splitlines()[:2] == lines[:2]


@pytest.mark.parametrize(
    ("verb", "state"),
    [("resolve", "resolved"), ("reject", "rejected"), ("cancel", "rejected_canceled")],
)
def test_settle_a_promise(api: Api, verb: str, state: str) -> None:
    assert api("promise.create", id="p", timeoutAt=FAR).ok
    record = as_json("promises", verb, "p", "--data", '{"ok": true}')["promise"]
    assert (record["state"], record["value"]) == (state, {"data": b64('{"ok": true}')})
    out = resonate("promises", "get", "p")
    assert f"state    {state}" in out
    assert 'value    {"ok": true}' in out


def test_refusals_are_command_errors(api: Api) -> None:
    with pytest.raises(CommandError, match=r"promise\.get: 404 promise not found"):
        resonate("promises", "get", "nope")
    with pytest.raises(CommandError, match="404"):
        resonate("promises", "resolve", "nope")
    with pytest.raises(CommandError, match=r"400 .*cron"):
        resonate(
            "schedules",
            "create",
            "s",
            "--cron",
            "never",
            "--promise-id",
            "x",
            "--promise-timeout",
            "1m",
        )


def test_search_promises_in_aligned_columns_with_a_cursor(api: Api) -> None:
    for id in ("a", "bb", "ccc"):
        assert api("promise.create", id=id, timeoutAt=FAR, tags={"team": "x"}).ok
    assert api("promise.create", id="dead", timeoutAt=5_000).ok
    lines = resonate("promises", "search", "--limit", "2").splitlines()
    assert lines[0].split() == ["ID", "STATE", "CREATED", "TIMEOUT", "SETTLED"]
    assert [line.split()[0] for line in lines[1:3]] == ["a", "bb"]
    assert columns(lines[0]) == columns(lines[1]) == columns(lines[2])
    assert lines[3] == "more: --cursor bb"
    rest = resonate("promises", "search", "--limit", "2", "--cursor", "bb").splitlines()
    assert [line.split()[0] for line in rest[1:]] == ["ccc", "dead"]

    dead = resonate("promises", "search", "--state", "rejected_timedout").splitlines()
    assert [line.split()[:2] for line in dead[1:]] == [["dead", "rejected_timedout"]]
    tagged = as_json("promises", "search", "--tag", "team=x")
    assert [p["id"] for p in tagged["promises"]] == ["a", "bb", "ccc"]
    assert "cursor" not in tagged
    assert resonate("promises", "search", "--tag", "team=none").strip() == "no promises"


# --- tasks --------------------------------------------------------------------------------------


def test_tasks_get_search_halt_continue(api: Api) -> None:
    assert api("promise.create", id="job", timeoutAt=FAR, tags={TARGET: "poll://any@w"}).ok
    assert api("promise.create", id="job2", timeoutAt=FAR, tags={TARGET: "poll://any@w"}).ok
    out = resonate("tasks", "get", "job").splitlines()
    assert [line.split() for line in out[:3]] == [
        ["id", "job"],
        ["state", "pending"],
        ["version", "0"],
    ]
    assert as_json("tasks", "get", "job")["task"]["state"] == "pending"

    assert resonate("tasks", "halt", "job").strip() == "halted task job"
    assert Task.objects.get(promise_id="job").state == "halted"
    table = resonate("tasks", "search", "--state", "halted").splitlines()
    assert table[0].split() == ["ID", "STATE", "VERSION", "PID", "RESUMES"]
    assert table[1].split() == ["job", "halted", "0", "-", "0"]
    assert len(table) == 2

    assert as_json("tasks", "continue", "job") == {}
    assert Task.objects.get(promise_id="job").state == "pending"
    with pytest.raises(CommandError, match="409"):
        resonate("tasks", "continue", "job")
    assert [t["id"] for t in as_json("tasks", "search")["tasks"]] == ["job", "job2"]


# --- schedules ----------------------------------------------------------------------------------


def test_schedules_create_get_search_delete(db: Any) -> None:
    out = resonate(
        "schedules",
        "create",
        "nightly",
        "--cron",
        "0 3 * * *",
        "--promise-id",
        "{{.id}}.{{.timestamp}}",
        "--promise-timeout",
        "1h",
        "--promise-tag",
        f"{TARGET}=poll://any@w",
        "--promise-data",
        "payload",
    )
    s = Schedule.objects.get(id="nightly")
    assert (s.promise_timeout, s.promise_tags, s.promise_param_data) == (
        3_600_000,
        {TARGET: "poll://any@w"},
        b64("payload"),
    )
    assert "promise timeout  1h" in out
    assert "03:00:00.000 UTC" in out
    record = as_json("schedules", "get", "nightly")["schedule"]
    assert record["nextRunAt"] == s.next_run_at
    table = resonate("schedules", "search", "--tag", f"{TARGET}=poll://any@w").splitlines()
    assert table[0].split() == ["ID", "CRON", "NEXT", "RUN", "PROMISE", "ID"]
    assert table[1].startswith("nightly  0 3 * * *")
    assert resonate("schedules", "delete", "nightly").strip() == "deleted schedule nightly"
    assert not Schedule.objects.exists()
    with pytest.raises(CommandError, match="404"):
        resonate("schedules", "delete", "nightly")
    assert as_json("schedules", "search") == {"schedules": []}


# --- invoke -------------------------------------------------------------------------------------


def param_of(p: Promise) -> Any:
    assert p.param_data is not None
    return json.loads(base64.b64decode(p.param_data))


def test_invoke_creates_a_targeted_root_promise_and_its_task(db: Any) -> None:
    before = now_ms()
    out = resonate(
        "invoke", "run.1", "--func", "greet", "--arg", "Ann", "--arg", "3", "--arg", '{"x": 1}'
    )
    after = now_ms()
    p = Promise.objects.get(id="run.1")
    assert param_of(p) == {"func": "greet", "args": ["Ann", 3, {"x": 1}], "version": 1}
    assert p.tags == {
        "resonate:origin": "run.1",
        "resonate:branch": "run.1",
        "resonate:parent": "run.1",
        "resonate:scope": "global",
        TARGET: "poll://any@default",
    }
    assert before + 3_600_000 <= p.timeout_at <= after + 3_600_000
    assert Task.objects.get(promise_id="run.1").state == "pending"
    assert out.splitlines()[0] == "invoked greet as run.1"
    assert '{"func": "greet", "args": ["Ann", 3, {"x": 1}], "version": 1}' in out


def test_invoke_with_json_args_target_timeout_delay_and_version(db: Any) -> None:
    before = now_ms()
    data = as_json(
        "invoke",
        "run.2",
        "--func",
        "add",
        "--json-args",
        '[1, "2", [3]]',
        "--target",
        "poll://any@math",
        "--timeout",
        "30s",
        "--delay",
        "5s",
        "--version",
        "2",
    )
    after = now_ms()
    p = Promise.objects.get(id="run.2")
    assert data["promise"]["id"] == "run.2"
    assert param_of(p) == {"func": "add", "args": [1, "2", [3]], "version": 2}
    assert p.tags[TARGET] == "poll://any@math"
    assert before + 5_000 <= int(p.tags["resonate:delay"]) <= after + 5_000
    assert before + 30_000 <= p.timeout_at <= after + 30_000
    task = Task.objects.get(promise_id="run.2")
    assert task.retry_at == int(p.tags["resonate:delay"])  # not dispatched before the delay


def test_invoke_argument_mistakes(db: Any) -> None:
    with pytest.raises(CommandError, match="either --arg or --json-args"):
        resonate("invoke", "r", "--func", "f", "--arg", "1", "--json-args", "[2]")
    with pytest.raises(CommandError, match="JSON array"):
        resonate("invoke", "r", "--func", "f", "--json-args", '{"a": 1}')
    with pytest.raises(CommandError, match="--func"):
        resonate("invoke", "r")
    assert not Promise.objects.exists()


# --- tree ---------------------------------------------------------------------------------------


@pytest.fixture
def call_tree(api: Api) -> None:
    def make(id: str, parent: str, created: int, **tags: str) -> None:
        tags = {"resonate:parent": parent, **tags}
        assert api("promise.create", now=created, id=id, timeoutAt=FAR, tags=tags).ok

    call = b64(json.dumps({"func": "main", "args": [], "version": 1}))
    assert api(
        "promise.create",
        id="root",
        timeoutAt=FAR,
        param={"data": call},
        tags={"resonate:parent": "root", "resonate:scope": "global", TARGET: "poll://any@w"},
    ).ok
    make("root.2", "root", 2_000, **{"resonate:timer": "true"})
    make("root.1", "root", 1_000, **{"resonate:scope": "local"})
    make("root.1.1", "root.1", 1_500)
    make("elsewhere", "other", 1_000)
    assert api("promise.settle", id="root.1", state="resolved").ok


def test_tree_draws_the_call_tree_with_states(call_tree: None) -> None:
    assert resonate("tree", "root").splitlines() == [
        "root [pending] rpc main",
        "├── root.1 [resolved] run",
        "│   └── root.1.1 [pending]",
        "└── root.2 [pending] sleep",
    ]
    assert resonate("tree", "root.1").splitlines() == [
        "root.1 [resolved] run",
        "└── root.1.1 [pending]",
    ]


def test_tree_as_json_nests_the_records(call_tree: None) -> None:
    data = as_json("tree", "root")

    def shape(node: dict[str, Any]) -> Any:
        return [node["promise"]["id"], [shape(c) for c in node["children"]]]

    assert shape(data) == ["root", [["root.1", [["root.1.1", []]]], ["root.2", []]]]
    assert data["children"][0]["promise"]["state"] == "resolved"


def test_tree_of_a_missing_promise_is_an_error(db: Any) -> None:
    with pytest.raises(CommandError, match="404"):
        resonate("tree", "nope")


# --- against a running server -------------------------------------------------------------------


def test_every_group_works_against_a_running_server(live_server: Any) -> None:
    server = ["--server", live_server.url]
    created = json.loads(resonate("promises", "create", "r1", "--timeout", "1h", "--json", *server))
    assert created["promise"]["state"] == "pending"
    assert Promise.objects.filter(id="r1").exists()  # the server's database is this one
    assert as_json("promises", "get", "r1", *server) == as_json("promises", "get", "r1")
    assert "state    resolved" in resonate("promises", "resolve", "r1", *server)
    lines = resonate("promises", "search", *server).splitlines()
    assert lines[1].split()[:2] == ["r1", "resolved"]

    resonate("invoke", "r2", "--func", "f", "--arg", "1", *server)
    assert param_of(Promise.objects.get(id="r2"))["args"] == [1]
    assert resonate("tasks", "halt", "r2", *server).strip() == "halted task r2"
    assert as_json("tasks", "get", "r2", *server)["task"]["state"] == "halted"
    assert resonate("tasks", "continue", "r2", *server).startswith("continued task r2")
    assert [t["id"] for t in as_json("tasks", "search", *server)["tasks"]] == ["r2"]
    assert resonate("tree", "r2", *server).strip() == "r2 [pending] rpc f"

    resonate(
        "schedules",
        "create",
        "s",
        "--cron",
        "* * * * *",
        "--promise-id",
        "x",
        "--promise-timeout",
        "1m",
        *server,
    )
    assert as_json("schedules", "get", "s", *server)["schedule"]["cron"] == "* * * * *"
    assert [s["id"] for s in as_json("schedules", "search", *server)["schedules"]] == ["s"]
    assert resonate("schedules", "delete", "s", *server).strip() == "deleted schedule s"

    with pytest.raises(CommandError, match=r"promise\.get: 404"):
        resonate("promises", "get", "nope", *server)


def test_a_server_that_does_not_speak_the_protocol_is_an_error(live_server: Any) -> None:
    with pytest.raises(CommandError, match="without a protocol reply"):
        resonate("promises", "get", "p", "--server", f"{live_server.url}/api/promises")


def test_an_unreachable_server_is_an_error(db: Any) -> None:
    with pytest.raises(CommandError, match="cannot reach"):
        resonate("promises", "get", "p", "--server", "http://127.0.0.1:9")


class Recorder(BaseHTTPRequestHandler):
    """A stand-in server that records what it is sent and answers like POST / would."""

    seen: list[tuple[str | None, Any]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append((self.headers.get("Authorization"), body))
        reply = {
            "kind": body["kind"],
            "head": {"corrId": body["head"]["corrId"], "status": 200, "version": "2026-04-01"},
            "data": {
                "task": {"id": body["data"]["id"], "state": "pending", "version": 0, "resumes": 0}
            },
        }
        payload = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Recorder.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_token_is_sent_as_a_bearer_header_in_an_envelope(recorder: str) -> None:
    out = resonate("tasks", "get", "t1", "--server", recorder, "--token", "s3cret")
    assert out.splitlines()[0].split() == ["id", "t1"]
    [(auth, envelope)] = Recorder.seen
    assert auth == "Bearer s3cret"
    assert (envelope["kind"], envelope["data"]) == ("task.get", {"id": "t1"})
    assert envelope["head"]["corrId"]
