"""How people read protocol values, for the admin and the CLI alike: instants, durations and
base64 payloads. Pure: no database, no markup."""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime


def iso(ms: int) -> str:
    """``2026-12-01 03:04:05.678 UTC``; the raw ms when the instant is out of range."""
    try:
        moment = datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def span(ms: int) -> str:
    """``1d 2h``, ``3m 4s``, ``250ms``: the two largest units (a zero second unit is left out)."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or parts:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(p for p in parts if not p.startswith("0")) or "0s"


def relative(ms: int, now: int) -> str:
    """``in 3m 4s`` or ``2h ago``."""
    return f"in {span(ms - now)}" if ms > now else f"{span(now - ms)} ago"


def decoded_bytes(data: str) -> bytes | None:
    """A value's ``data`` (base64 by the SDKs' convention) as bytes; None if it is not base64."""
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def decoded_text(data: str | None) -> str | None:
    """The text a value's ``data`` decodes to; the data as sent when it is not base64 UTF-8."""
    if data is None:
        return None
    raw = decoded_bytes(data)
    if raw is None:
        return data
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return data
