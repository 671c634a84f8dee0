"""The function a promise runs, as the SDKs name it on the wire: a targeted promise's ``param.data``
is base64 of a JSON object whose ``func`` is the registered name (``resonate-sdk``: ``{"args",
"kwargs", "func", "version"}``; ``@resonatehq/sdk``: ``{"func", "args", "version"}``; the CLI's
``invoke``: ``{"func", "args", "version"}``). A ``ctx.run`` child sends no param (it runs in the
parent's process), a timer none either: they have no name here.
"""

from __future__ import annotations

import json

from resonate_project.core.present import decoded_bytes

# Longer names are cut: the column is for listing and grouping, not for dispatch.
FUNCTION_MAX_CHARS = 200


def function_name(data: str | None) -> str | None:
    """``func`` of a call's param, or None when the param is not such a call."""
    if not data or data[0] != "e":  # base64 of '{' starts with 'e'
        return None
    raw = decoded_bytes(data)
    if raw is None:
        return None
    try:
        call = json.loads(raw)
    except ValueError:  # not JSON, or not UTF-8
        return None
    name = call.get("func") if isinstance(call, dict) else None
    if not isinstance(name, str) or not name or not storable(name):
        return None
    return name[:FUNCTION_MAX_CHARS]


def storable(text: str) -> bool:
    """No NUL and no lone surrogate: decoded JSON may hold either, and no database stores them."""
    if "\x00" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True
