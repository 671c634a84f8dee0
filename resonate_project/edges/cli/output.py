"""How a command prints for people: aligned fields and tables, UTC instants, values decoded
when they are text (``--json`` prints the protocol's data instead)."""

from __future__ import annotations

import argparse
import base64
from typing import Any

from resonate_project.core.present import decoded_text, iso, relative, span

# --- formatting ---------------------------------------------------------------------------------


def when(ms: int | None) -> str:
    return "-" if ms is None else iso(ms)


def value_line(value: dict[str, Any]) -> str:
    text = decoded_text(value.get("data"))
    headers = value.get("headers") or {}
    if headers:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(headers.items()))
        return f"{text if text is not None else '-'}  (headers: {shown})"
    return text if text is not None else "-"


def fields(rows: list[tuple[str, Any]]) -> list[str]:
    width = max(len(label) for label, _ in rows)
    lines = []
    for label, value in rows:
        values = value if isinstance(value, list) else [value]
        for i, item in enumerate(values or ["-"]):
            lines.append(f"{label if i == 0 else '':<{width}}  {item}".rstrip())
    return lines


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows, strict=True)]
    return [
        "  ".join(f"{c:<{w}}" for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [headers, *rows]
    ]


def tag_lines(tags: dict[str, str]) -> list[str]:
    return [f"{k}={v}" for k, v in sorted(tags.items())]


def promise_lines(p: dict[str, Any], now: int) -> list[str]:
    return fields(
        [
            ("id", p["id"]),
            ("state", p["state"]),
            ("timeout", f"{when(p['timeoutAt'])} ({relative(p['timeoutAt'], now)})"),
            ("created", when(p["createdAt"])),
            ("settled", when(p.get("settledAt"))),
            ("param", value_line(p["param"])),
            ("value", value_line(p["value"])),
            ("tags", tag_lines(p["tags"])),
        ]
    )


def task_lines(t: dict[str, Any]) -> list[str]:
    return fields(
        [
            ("id", t["id"]),
            ("state", t["state"]),
            ("version", t["version"]),
            ("resumes", t["resumes"]),
            ("pid", t.get("pid", "-")),
            ("ttl", span(t["ttl"]) if "ttl" in t else "-"),
        ]
    )


def schedule_lines(s: dict[str, Any], now: int) -> list[str]:
    return fields(
        [
            ("id", s["id"]),
            ("cron", s["cron"]),
            ("promise id", s["promiseId"]),
            ("promise timeout", span(s["promiseTimeout"])),
            ("promise param", value_line(s["promiseParam"])),
            ("promise tags", tag_lines(s["promiseTags"])),
            ("created", when(s["createdAt"])),
            ("next run", f"{when(s['nextRunAt'])} ({relative(s['nextRunAt'], now)})"),
            ("last run", when(s.get("lastRunAt"))),
        ]
    )


def page_lines(what: str, headers: list[str], rows: list[list[str]], cursor: Any) -> list[str]:
    lines = table(headers, rows) if rows else [f"no {what}"]
    if cursor:
        lines.append(f"more: --cursor {cursor}")
    return lines


def value_of(data: str | None, headers: list[tuple[str, str]]) -> dict[str, Any]:
    value: dict[str, Any] = {}
    if headers:
        value["headers"] = dict(headers)
    if data is not None:
        value["data"] = base64.b64encode(data.encode()).decode()
    return value


def search_data(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    data = {k: v for k, v in extra.items() if v}
    if args.limit is not None:
        data["limit"] = args.limit
    if args.cursor:
        data["cursor"] = args.cursor
    return data
