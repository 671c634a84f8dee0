"""A Django process the worker tests talk to: one JSON request per stdin line, one JSON answer
per stdout line. It uses only Django's own Tasks API (``enqueue``, ``get_result``,
``TaskResult.refresh``) on the database the workers share, so the test process needs no Django
database of its own.

    {"op": "enqueue", "task": "add", "args": [2, 3], "kwargs": {}, "run_after_ms": 0}
    {"op": "enqueue", ..., "rollback": true}      enqueued inside a transaction that rolls back
    {"op": "result", "id": "..."}                 the TaskResult as JSON, or {"missing": true}
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")
django.setup()

from django.db import transaction  # noqa: E402
from django.tasks import TaskResult, TaskResultStatus  # noqa: E402
from django.tasks.exceptions import TaskResultDoesNotExist  # noqa: E402

from tests import tasksapp_fixtures as fixtures  # noqa: E402


class Rollback(Exception):
    pass


def stamp(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def as_json(result: TaskResult) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": result.id,
        "status": str(result.status),
        "attempts": result.attempts,
        "worker_ids": list(result.worker_ids),
        "errors": [
            {"exception_class_path": e.exception_class_path, "traceback": e.traceback}
            for e in result.errors
        ],
        "enqueued_at": stamp(result.enqueued_at),
        "started_at": stamp(result.started_at),
        "finished_at": stamp(result.finished_at),
        "last_attempted_at": stamp(result.last_attempted_at),
    }
    if result.status == TaskResultStatus.SUCCESSFUL:
        data["return_value"] = result.return_value
    return data


def main() -> None:
    known: dict[str, TaskResult] = {}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            answer = handle(req, known)
        except Exception as exc:
            answer = {"exception": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


def handle(req: dict[str, Any], known: dict[str, TaskResult]) -> dict[str, Any]:
    if req["op"] == "enqueue":
        task = getattr(fixtures, req["task"])
        if req.get("run_after_ms"):
            delay = timedelta(milliseconds=req["run_after_ms"])
            task = task.using(run_after=datetime.now(UTC) + delay)
        if not req.get("rollback"):
            result = task.enqueue(*req.get("args", []), **req.get("kwargs", {}))
            known[result.id] = result
            return {"id": result.id, "run_after": stamp(task.run_after)}
        ids = []
        try:
            with transaction.atomic():
                ids.append(task.enqueue(*req.get("args", []), **req.get("kwargs", {})).id)
                raise Rollback
        except Rollback:
            return {"id": ids[0]}
    if req["op"] == "result":
        result = known.get(req["id"])
        try:
            if result is None:
                result = fixtures.add.get_backend().get_result(req["id"])
                known[req["id"]] = result
            else:
                result.refresh()
        except TaskResultDoesNotExist:
            return {"missing": True}
        return as_json(result)
    raise ValueError(f"unknown op {req['op']!r}")


if __name__ == "__main__":
    main()
