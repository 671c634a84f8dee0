"""Shared fixtures. The suite runs once on SQLite and once on PostgreSQL (``DATABASE_URL``)."""

from __future__ import annotations

import os
from typing import Any

# The in-process suite runs inside pytest-django's transaction on the main thread, so POST /
# must run its handler there too (real servers use a thread pool; tests/integration covers it).
os.environ["RESONATE_WEB_THREADS"] = "0"

import pytest
from django.db import connection

from resonate_project.core.protocol import Response
from resonate_project.envelope import call

FAR = 10**13  # a deadline nobody reaches in a test
ON_POSTGRES = os.environ.get("DATABASE_URL", "").startswith("postgres")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # PostgreSQL-only tests (races, SKIP LOCKED) are deselected on the SQLite run, not skipped.
    if ON_POSTGRES:
        return
    kept = [item for item in items if item.get_closest_marker("postgres") is None]
    deselected = [item for item in items if item.get_closest_marker("postgres") is not None]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


class Api:
    """Runs request kinds through the same dispatch as ``POST /`` (parsing, 400s, handler)."""

    def __call__(self, kind: str, now: int = 1_000, **data: Any) -> Response:
        return call(kind, data, now)


@pytest.fixture
def api(db: Any) -> Api:
    return Api()


@pytest.fixture
def vendor(db: Any) -> str:
    return connection.vendor
