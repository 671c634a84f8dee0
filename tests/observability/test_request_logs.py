"""Structured request logs: with ``LOG_FORMAT=json`` one JSON line per envelope request; in plain
text nothing per request unless DEBUG is on."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from opentelemetry.sdk.trace import TracerProvider

from resonate_project.edges.envelope import handle_body
from resonate_project.observability import tracing
from resonate_project.observability.logs import JsonFormatter
from tests.support.factories import FAR


def create(id: str, corr_id: str = "c-7") -> int:
    body = {
        "kind": "promise.create",
        "head": {"corrId": corr_id},
        "data": {"id": id, "timeoutAt": FAR},
    }
    status, _ = handle_body(json.dumps(body).encode(), 1_000)
    return status


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    formatter = JsonFormatter()
    return [json.loads(formatter.format(r)) for r in caplog.records if r.name == "resonate.request"]


def test_a_json_line_per_request_with_its_kind_id_status_duration_and_corr_id(
    db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="resonate.request")
    with override_settings(LOG_FORMAT="json"):
        assert create("p1") == 200
        assert create("p1", corr_id="c-8") == 200  # the same create again: deduplicated
        handle_body(b"{", 1_000)
    first, again, broken = lines(caplog)
    duration = first.pop("duration_ms")
    assert isinstance(duration, float)
    assert duration >= 0
    assert isinstance(first.pop("time"), str)
    assert first == {
        "level": "INFO",
        "logger": "resonate.request",
        "message": f"promise.create p1 200 {duration:.1f}ms",
        "kind": "promise.create",
        "id": "p1",
        "status": 200,
        "corrId": "c-7",
    }
    assert (again["corrId"], again["status"]) == ("c-8", 200)
    assert (broken["kind"], broken["id"], broken["status"], broken["corrId"]) == ("", "", 400, "")


@pytest.fixture
def traced() -> Iterator[None]:
    # The request span only; the global provider is left alone.
    tracing.install(TracerProvider(), set_global=False)
    yield
    tracing.uninstall()


def test_the_json_line_carries_the_trace_id_when_tracing_is_on(
    db: Any, caplog: pytest.LogCaptureFixture, traced: None
) -> None:
    caplog.set_level(logging.INFO, logger="resonate.request")
    with override_settings(LOG_FORMAT="json"):
        assert create("p2") == 200
    [line] = lines(caplog)
    assert len(line["trace_id"]) == 32
    assert int(line["trace_id"], 16) != 0


def test_plain_text_logs_nothing_per_request_unless_debug(
    db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="resonate.request")
    assert create("p3") == 200
    assert [r for r in caplog.records if r.name == "resonate.request"] == []
    caplog.set_level(logging.DEBUG, logger="resonate.request")
    assert create("p4") == 200
    [record] = [r for r in caplog.records if r.name == "resonate.request"]
    assert record.levelno == logging.DEBUG
    assert record.getMessage().startswith("promise.create p4 200 ")


def test_the_json_formatter_turns_any_record_into_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "resonate.push", logging.ERROR, __file__, 1, "x %s", ("y",), None
        )
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert (out["level"], out["logger"], out["message"]) == ("ERROR", "resonate.push", "x y")
    assert "ValueError: boom" in out["exc"]
