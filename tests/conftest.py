"""Shared fixtures. The suite runs once on SQLite and once on PostgreSQL (``DATABASE_URL``)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

# The in-process suite runs inside pytest-django's transaction on the main thread, so POST /
# must run its handler there too (real servers use a thread pool; tests/system covers it).
os.environ["RESONATE_WEB_THREADS"] = "0"
# Static files (resonate_project/static.py): the `manage.py serve` processes the suite starts
# collect into a directory of this run, not the checkout's var/static.
os.environ["DJANGO_STATIC_ROOT"] = tempfile.mkdtemp(prefix="resonate-static-")

import pytest
from django.conf import settings
from django.db import connection
from django.test import override_settings

from tests.support.factories import FAR, Api

atexit.register(shutil.rmtree, os.environ["DJANGO_STATIC_ROOT"], ignore_errors=True)

__all__ = ["FAR", "Api"]  # re-exported until every test imports tests.support.factories
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


@pytest.fixture(autouse=True, scope="session")
def _static_files_by_plain_names() -> Iterator[None]:
    """Pages rendered in this process link static files by their plain names: the live server
    serves them from the apps' folders (Django's finders), where no hashed name exists, and a
    manifest a `make run` left in var/static would name files this checkout may not have."""
    plain = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
    with override_settings(STORAGES={**settings.STORAGES, "staticfiles": plain}):
        yield


@pytest.fixture
def api(db: Any) -> Api:
    return Api()


@pytest.fixture
def vendor(db: Any) -> str:
    return connection.vendor
