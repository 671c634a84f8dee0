"""OpenTelemetry traces: the envelope request span, its database children, the push drain's trace
context on the wire, and nothing at all when no ``OTEL_*`` variable is set."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from outbox.push import drain_push
from resonate_project.core.clock import now_ms
from resonate_project.edges.envelope import handle_body
from resonate_project.edges.kinds import KINDS
from resonate_project.engine import outbox as enqueue
from resonate_project.observability import tracing
from tests.support.factories import FAR

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # The global provider can be set once per process: the steps' and the drain's tracers
    # (the OpenTelemetry API) need it, the request span does not.
    unset = isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    tracing.install(provider, set_global=unset)
    yield exporter
    tracing.uninstall()
    provider.shutdown()  # later tests' spans (the steps, the drain) are dropped


@pytest.fixture
def spans(exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    exporter.clear()
    return exporter


def envelope(kind: str, corr_id: str = "c-1", **data: Any) -> tuple[int, dict[str, Any]]:
    body = {"kind": kind, "head": {"corrId": corr_id}, "data": data}
    status, reply = handle_body(json.dumps(body).encode(), 1_000)
    return status, json.loads(reply)


def named(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = [s for s in exporter.get_finished_spans() if s.name == name]
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


def test_an_envelope_request_is_a_span_named_by_its_kind_with_its_ids(
    db: Any, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert envelope("promise.create", id="p1", timeoutAt=FAR)[0] == 200
    seen: list[trace.Span] = []
    kind = KINDS["promise.get"]
    handler = kind.handler

    def spy(req: Any, now: int) -> Any:
        seen.append(trace.get_current_span())
        return handler(req, now)

    monkeypatch.setitem(KINDS, "promise.get", dataclasses.replace(kind, handler=spy))
    status, _ = envelope("promise.get", corr_id="c-2", id="p1")
    assert status == 200

    create = named(spans, "resonate promise.create")
    get = named(spans, "resonate promise.get")
    assert create.kind == trace.SpanKind.SERVER
    assert dict(create.attributes or {}) == {
        "resonate.kind": "promise.create",
        "resonate.id": "p1",
        "resonate.ids": ("p1",),
        "resonate.corr_id": "c-1",
        "resonate.status": 200,
    }
    assert (get.attributes or {})["resonate.corr_id"] == "c-2"
    # The handler ran with the request's span current: what its database spans hang from.
    assert [s.get_span_context().span_id for s in seen] == [get.context.span_id]


def test_a_request_refused_before_its_kind_is_known_keeps_the_generic_name(
    db: Any, spans: InMemorySpanExporter
) -> None:
    status, _ = handle_body(b"not json", 1_000)
    assert status == 400
    span = named(spans, "resonate request")
    assert (span.attributes or {})["resonate.status"] == 400


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_database_spans_of_a_request_are_its_children(spans: InMemorySpanExporter) -> None:
    # Reconnect, as a server process does after tracing is installed: psycopg's instrumentation
    # wraps the connection when it is opened.
    connection.close()
    assert envelope("promise.create", id="p-db", timeoutAt=FAR)[0] == 200
    request = named(spans, "resonate promise.create")
    children = [s for s in spans.get_finished_spans() if s.parent == request.context]
    assert children, [s.name for s in spans.get_finished_spans()]
    assert all((s.attributes or {}).get("db.system") == "postgresql" for s in children)
    assert all(s.context.trace_id == request.context.trace_id for s in children)


class _Receiver:
    """An HTTP server on 127.0.0.1 recording the headers of each POST and answering 200."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_push_carries_the_drain_spans_trace_context(db: Any, spans: InMemorySpanExporter) -> None:
    receiver = _Receiver()
    try:
        address = f"http://127.0.0.1:{receiver.server.server_address[1]}/hook"
        enqueue.unblock({"id": "p", "state": "resolved"}, address, now_ms())
        with override_settings(RESONATE={"PUSH_ALLOWED": "127.0.0.1", "PUSH_TIMEOUT_MS": 5_000}):
            assert drain_push(100) == 1
    finally:
        receiver.close()
    drain = named(spans, "resonate drain")
    assert (drain.attributes or {})["resonate.claimed"] == 1
    [headers] = receiver.headers
    version, trace_id, parent_id, flags = headers["traceparent"].split("-")
    assert version == "00"  # W3C trace context
    assert int(flags, 16) & 1  # sampled
    assert trace_id == format(drain.context.trace_id, "032x")
    # The parent is the drain span, or the aiohttp client's span under it (when the session was
    # made after the client was instrumented).
    drain_id = drain.context.span_id
    under_drain = {drain_id} | {
        s.context.span_id
        for s in spans.get_finished_spans()
        if s.parent is not None and s.parent.span_id == drain_id
    }
    assert int(parent_id, 16) in under_drain


def test_a_step_run_is_a_span_with_the_rows_it_handled(
    db: Any, spans: InMemorySpanExporter
) -> None:
    from resonate_project.engine.steps import STEPS, run_due

    external = {"resonate:external": "true"}
    assert envelope("promise.create", id="late", timeoutAt=2_000, tags=external)[0] == 200
    run_due(now=3_000, limit=10)
    tick = named(spans, "resonate tick")
    step = named(spans, "resonate step promise_timeouts")
    assert (step.attributes or {})["resonate.rows"] == 1
    assert (tick.attributes or {})["resonate.rows"] == 1
    steps = [s for s in spans.get_finished_spans() if s.name.startswith("resonate step ")]
    assert [s.name for s in steps] == [f"resonate step {step.__name__}" for step in STEPS]
    assert all(s.parent is not None and s.parent.span_id == tick.context.span_id for s in steps)


CHECK_OFF = """
import json, sys
from opentelemetry import trace
import resonate_project.asgi  # the ASGI app start: configures tracing if asked to
from resonate_project.edges.envelope import handle_body
from resonate_project.observability import tracing
status, _ = handle_body(b'{"kind": "no.such.kind", "head": {}, "data": {}}', 1000)
print(json.dumps({
    "status": status,
    "enabled": tracing.enabled(),
    "proxy": isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider),
    "sdk": sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk")),
    "instrumented": sorted(m for m in sys.modules if m.startswith("opentelemetry.instrumentation")),
}))
"""


def test_without_otel_variables_nothing_is_set_up() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["DJANGO_SETTINGS_MODULE"] = "resonate_project.settings"
    out = subprocess.run(
        [sys.executable, "-c", CHECK_OFF], env=env, cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "status": 400,
        "enabled": False,
        "proxy": True,
        "sdk": [],
        "instrumented": [],
    }


@pytest.mark.parametrize(
    ("environ", "wanted"),
    [
        ({}, False),
        ({"PATH": "/bin"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_SERVICE_NAME": "resonate-eu"}, True),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_SERVICE_NAME": "x", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_tracing_is_wanted_only_when_an_otel_variable_asks(
    environ: dict[str, str], wanted: bool
) -> None:
    assert tracing.wanted(environ) is wanted
