"""OpenTelemetry traces, configured by the standard ``OTEL_*`` environment variables.

Off unless one is set: then nothing of the SDK is imported, no tracer provider is installed, and
the envelope's hot path skips its span on one boolean (:func:`enabled`). The internal steps and the
push drain call the OpenTelemetry API directly (a no-op without a provider), as libraries do.

On, :func:`configure` (once per process: the ASGI app, ``manage.py serve``, the Celery worker)
installs a tracer provider exporting with OTLP over HTTP (``OTEL_EXPORTER_OTLP_*``) or to the
console (``OTEL_TRACES_EXPORTER=console``), sampled by ``OTEL_TRACES_SAMPLER``, and instruments
Django, psycopg, Celery and the aiohttp client. ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none`` keep it off.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context, trace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

log = logging.getLogger("resonate.tracing")

SERVICE_NAME = "resonate"
# A task.suspend may name thousands of awaited promises; a span carries the first ones.
MAX_ID_ATTRIBUTES = 32

_lock = threading.Lock()
_enabled = False
_tracer: trace.Tracer = trace.NoOpTracer()
_instrumentors: list[Any] = []


def enabled() -> bool:
    return _enabled


def tracer() -> trace.Tracer:
    return _tracer


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces: any ``OTEL_*`` variable, unless disabled."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(name.startswith("OTEL_") for name in environ)


def configure() -> bool:
    """Install tracing if the environment asks for it; idempotent. Returns whether it is on."""
    if _enabled:
        return True
    if not wanted():
        return False
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create()
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
    provider = TracerProvider(resource=resource)  # reads OTEL_TRACES_SAMPLER itself
    for exporter in _exporters():
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return install(provider)


def _exporters() -> list[Any]:
    names = os.environ.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")
    exporters: list[Any] = []
    for name in (n.strip() for n in names):
        if name == "otlp":
            protocol = os.environ.get(
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
                os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            )
            if protocol != "http/protobuf":
                log.warning("OTLP protocol %r is not installed; exporting http/protobuf", protocol)
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            exporters.append(OTLPSpanExporter())
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name:
            log.warning("OTEL_TRACES_EXPORTER %r is not supported (otlp, console); ignored", name)
    return exporters


def install(provider: TracerProvider, set_global: bool = True) -> bool:
    """Trace with ``provider`` (tests pass one with an in-memory exporter) and instrument the
    libraries. The global provider can be set only once per process (``set_global``)."""
    global _enabled, _tracer
    from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    with _lock:
        if _enabled:
            return True
        if set_global:
            trace.set_tracer_provider(provider)
        # Django's middleware is read when its handler is built: call this before that
        # (resonate_project.asgi does). The envelope itself is traced by request_scope.
        for instrumentor in (
            DjangoInstrumentor(),
            PsycopgInstrumentor(),
            CeleryInstrumentor(),
            AioHttpClientInstrumentor(),
        ):
            instrumentor.instrument(tracer_provider=provider)
            _instrumentors.append(instrumentor)
        _tracer = provider.get_tracer("resonate")
        _enabled = True
    return True


def uninstall() -> None:
    """Undo :func:`install` (tests); the global provider, once set, stays."""
    global _enabled, _tracer
    with _lock:
        for instrumentor in _instrumentors:
            instrumentor.uninstrument()
        _instrumentors.clear()
        _tracer = trace.NoOpTracer()
        _enabled = False


class RequestSpan:
    """The span of one envelope request, current while its handler runs (so the database spans
    are its children). Started as ``resonate request``: the kind is known only once decoded."""

    __slots__ = ("span", "token")

    def __init__(self) -> None:
        self.span = _tracer.start_span("resonate request", kind=trace.SpanKind.SERVER)
        self.token = context.attach(trace.set_span_in_context(self.span))

    def trace_id(self) -> str:
        ctx = self.span.get_span_context()
        return format(ctx.trace_id, "032x") if ctx.is_valid else ""

    def end(self, kind: str, ids: list[str], status: int, corr_id: str) -> None:
        context.detach(self.token)
        span = self.span
        if span.is_recording():
            if kind:
                span.update_name(f"resonate {kind}")
                span.set_attribute("resonate.kind", kind)
            if ids:
                span.set_attribute("resonate.id", ids[0])
                span.set_attribute("resonate.ids", ids[:MAX_ID_ATTRIBUTES])
            if corr_id:
                span.set_attribute("resonate.corr_id", corr_id)
            span.set_attribute("resonate.status", status)
            if status >= 500:
                span.set_status(trace.StatusCode.ERROR, f"status {status}")
        span.end()
