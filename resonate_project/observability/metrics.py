"""Prometheus metrics (filled in by the observability work)."""

from __future__ import annotations


def record_request(kind: str, status: int, seconds: float) -> None:
    """One envelope request answered: ``kind`` ("" when unparseable), HTTP ``status``."""
