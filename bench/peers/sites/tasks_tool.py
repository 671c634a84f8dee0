"""The peers' side of bench/peers/tasks.py, run with the peers' virtualenv in a process of its own
(``DJANGO_SETTINGS_MODULE`` and ``DATABASE_URL`` set by the harness); prints one JSON object.

    python tasks_tool.py enqueue --backend procrastinate --count 2000
    python tasks_tool.py versions

``enqueue`` sends the no-op the way each library's documentation does, one call per task (no
bulk API): Procrastinate's ``defer()`` and Django's ``enqueue()`` in transactions of 500, as the
project's own ``bench/djtool.py enqueue`` does; Celery's ``delay()`` (a broker, no transaction).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
import time
from collections.abc import Callable
from typing import Any

BATCH = 500
PACKAGES = ("Django", "procrastinate", "django-tasks-db", "celery", "kombu", "redis", "psycopg")


def sender(backend: str) -> Callable[[], object]:
    import django

    django.setup()
    if backend == "procrastinate":
        from tasks_procrastinate.tasks import noop as deferred

        return deferred.defer
    if backend == "tasksdb":
        from tasks_tasksdb.tasks import noop as task

        return task.enqueue
    from tasks_celery import celery_app
    from tasks_celery.tasks import noop as celery_task

    broker = str(celery_app.conf.broker_url)
    if not broker.startswith("redis://127.0.0.1"):  # never a default broker elsewhere
        raise SystemExit(f"Celery's broker is {broker}, not the loopback Redis")
    return celery_task.delay


def enqueue(backend: str, count: int) -> dict[str, Any]:
    from django.db import transaction

    send = sender(backend)
    started = time.perf_counter()
    for first in range(0, count, BATCH):
        n = min(BATCH, count - first)
        if backend == "celery":
            for _ in range(n):
                send()
            continue
        with transaction.atomic():
            for _ in range(n):
                send()
    seconds = time.perf_counter() - started
    return {"enqueued": count, "seconds": seconds, "per_s": count / seconds}


def versions() -> dict[str, Any]:
    out: dict[str, Any] = {"python": sys.version.split()[0]}
    for name in PACKAGES:
        out[name] = importlib.metadata.version(name)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("enqueue")
    p.add_argument("--backend", choices=["procrastinate", "tasksdb", "celery"], required=True)
    p.add_argument("--count", type=int, required=True)
    sub.add_parser("versions")
    args = parser.parse_args()
    out = enqueue(args.backend, args.count) if args.cmd == "enqueue" else versions()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
