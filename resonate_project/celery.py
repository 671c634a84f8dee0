"""The Celery application: a worker drains the outbox, beat is the metronome for internal steps."""

import os
from typing import Any

from celery import Celery
from celery.signals import worker_init, worker_process_shutdown, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")

app = Celery("resonate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _tracing(**kwargs: Any) -> None:
    # In the worker's main process, before its pool forks (the SDK re-arms its export thread in
    # each child). Off unless OTEL_* variables are set (resonate_project.observability.tracing).
    from resonate_project.observability import tracing

    tracing.configure()


@worker_ready.connect
def _metrics_exporter(sender: Any, **kwargs: Any) -> None:
    # METRICS_PORT in a worker: the prefork children's metrics reach it through
    # PROMETHEUS_MULTIPROC_DIR (docs/how-to/observability.md#several-processes).
    from resonate_project.observability.export import start_exporter

    start_exporter()


@worker_process_shutdown.connect
def _metrics_process_gone(pid: int | None = None, **kwargs: Any) -> None:
    # A prefork child leaves with os._exit (no atexit): drop its live gauges (SSE, in flight).
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())
