"""Hard limits on stored strings, shared by the wire types and the models.

Identifiers are indexed, and a PostgreSQL btree entry holds at most 2704 bytes (an index may pair
two identifiers), so every identifier-like string is capped at 1024 characters and 1024 bytes of
UTF-8. A cron expression is stored in a 255-character column.
"""

from __future__ import annotations

import json
import re
from typing import Any

ID_MAX_LENGTH = 1024
ID_MAX_BYTES = 1024
CRON_MAX_LENGTH = 255

# What no database here can store: PostgreSQL refuses NUL in text and jsonb, and a UTF-16
# surrogate (U+D800-U+DFFF, paired or not, is not a character in a Python str) has no UTF-8 form,
# so neither driver can send it. Refused at the edge on every database alike.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# A key shown as ``.key`` in a path; any other as ``["key"]``.
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_:]*")


def unstorable(value: str) -> str | None:
    """What in ``value`` cannot be stored (``NUL (\\u0000)``, ``a UTF-16 surrogate (\\ud800)``),
    or None. Linear; ASCII without NUL, the common case, is two C scans."""
    if "\x00" in value:
        return "NUL (\\u0000)"
    if value.isascii():
        return None
    found = _UNSTORABLE.search(value)
    return None if found is None else f"a UTF-16 surrogate (\\u{ord(found.group()):04x})"


def unstorable_in(doc: Any, path: str = "$") -> tuple[str, str] | None:
    """The first string in a decoded JSON document (a key or a value, depth first) that cannot
    be stored: where it is (the path in backticks, or "a key in" one) and what is wrong."""
    if isinstance(doc, str):
        bad = unstorable(doc)
        return None if bad is None else (f"`{path}`", bad)
    if isinstance(doc, dict):
        for key, value in doc.items():
            if (bad := unstorable(key)) is not None:
                return f"a key in `{path}`", bad
            name = f"{path}.{key}" if _PLAIN_KEY.fullmatch(key) else f"{path}[{json.dumps(key)}]"
            if (found := unstorable_in(value, name)) is not None:
                return found
    if isinstance(doc, list):
        for index, item in enumerate(doc):
            if (found := unstorable_in(item, f"{path}[{index}]")) is not None:
                return found
    return None


def unstorable_refusal(body: bytes, prefix: str = "$") -> str | None:
    """The refusal of a JSON text holding a string that cannot be stored, naming where it is;
    None when there is none (or the text is not JSON for another reason). Python's decoder keeps
    what msgspec refuses to decode (an unpaired surrogate escape), so it can tell where it is;
    it runs only for a body already refused, and only when an escape or a surrogate's UTF-8
    lead byte is in it."""
    if b"\\u" not in body and b"\xed" not in body:
        return None
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    found = unstorable_in(doc, prefix)
    if found is None:
        return None
    where, bad = found
    return f"{where} may not contain {bad}"
