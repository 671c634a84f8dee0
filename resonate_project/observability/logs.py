"""Structured logs: ``LOG_FORMAT=json`` makes every log record one JSON line and adds one line
per envelope request (logger ``resonate.request``, INFO). In plain text that request line is
logged at DEBUG only, so a default server still logs nothing per request."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from resonate_project.observability import tracing

request_log = logging.getLogger("resonate.request")

# The record attribute that carries a request's fields to the formatter.
FIELDS = "resonate"


def json_format() -> bool:
    return getattr(settings, "LOG_FORMAT", "text") == "json"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the request's fields if any,
    the current trace id when tracing is on, and the traceback if any."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(getattr(record, FIELDS, None) or {})
        if "trace_id" not in out and tracing.enabled():
            ctx = tracing.trace.get_current_span().get_span_context()
            if ctx.is_valid:
                out["trace_id"] = format(ctx.trace_id, "032x")
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


def _request_level() -> int:
    return logging.INFO if json_format() else logging.DEBUG


def request_line_enabled() -> bool:
    return request_log.isEnabledFor(_request_level())


def log_request(
    kind: str, ids: list[str], status: int, duration_s: float, corr_id: str, trace_id: str
) -> None:
    level = _request_level()
    if not request_log.isEnabledFor(level):
        return
    duration_ms = round(duration_s * 1000, 3)
    first = ids[0] if ids else ""
    fields: dict[str, Any] = {
        "kind": kind,
        "id": first,
        "status": status,
        "duration_ms": duration_ms,
        "corrId": corr_id,
    }
    if trace_id:
        fields["trace_id"] = trace_id
    request_log.log(
        level,
        "%s %s %d %.1fms",
        kind or "-",
        first or "-",
        status,
        duration_ms,
        extra={FIELDS: fields},
    )
