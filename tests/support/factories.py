"""Request factories the tests build their records with (tests/conftest.py's ``api`` fixture
returns an ``Api``)."""

from __future__ import annotations

from typing import Any

from resonate_project.core.protocol import Response
from resonate_project.edges.envelope import call

FAR = 10**13  # a deadline nobody reaches in a test


class Api:
    """Runs request kinds through the same dispatch as ``POST /`` (parsing, 400s, handler)."""

    def __call__(self, kind: str, now: int = 1_000, **data: Any) -> Response:
        return call(kind, data, now)
