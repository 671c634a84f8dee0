"""``MAX_JSON_DEPTH``: request bodies nested deeper are refused before any decoder sees them.

Decoders recurse per level (msgspec and the standard library raise ``RecursionError`` near 10,000
levels), and no request of the protocol nests deeper than about ten, so the envelope and the
resource API check the depth first. The check is linear in the body: strings are cut out and
everything but brackets dropped by C code (``bytes`` methods and one ``re``); only bodies with
more opening brackets than the limit get that far, and of those only the stretches that could
pass the limit are walked bracket by bracket.
"""

from __future__ import annotations

import re

from resonate_project.core.conf import resonate_settings

_STRUCTURE = bytes(set(range(256)) - set(b'[]{}"'))  # everything but brackets and quotes
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))
_FOLD = bytes.maketrans(b"{}", b"[]")
# A string once escapes are gone (possessive: an unterminated one fails in linear time).
_STRING = re.compile(rb'"[^"]*+"')


def outside_strings(body: bytes) -> bytes:
    """The brackets of ``body`` that are not inside strings, ``{}`` folded into ``[]``."""
    if b"\\" in body:
        # A backslash escapes the next byte: escaped backslashes first, then escaped quotes.
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    body = body.translate(None, _STRUCTURE)
    if b'"' in body:
        # Quotes now alternate open/close, so an adjacent pair is an empty string or the seam
        # between two strings with nothing outside them: dropping it keeps what is outside.
        body = _STRING.sub(b"", body.replace(b'""', b""))
    return body.translate(_FOLD, _NOT_BRACKETS)


def too_deep(body: bytes, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep somewhere in ``body``. Invalid
    JSON is left to the decoder, except that an opening bracket never closed still counts."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    brackets = outside_strings(body)
    step = max(limit, 1)
    depth = 0
    # Chunks of ``limit`` brackets: one whose openings cannot lift the depth past the limit is
    # settled by a count; only the others are walked one bracket at a time.
    for start in range(0, len(brackets), step):
        chunk = brackets[start : start + step]
        opening = chunk.count(b"[")
        if depth + opening <= limit:
            depth += 2 * opening - len(chunk)
            continue
        for byte in chunk:
            depth += 1 if byte == 0x5B else -1
            if depth > limit:
                return True
    return False


def depth_refusal(body: bytes) -> str | None:
    """The 400 message for a body nested deeper than ``MAX_JSON_DEPTH``, else None."""
    limit = resonate_settings().MAX_JSON_DEPTH
    if too_deep(body, limit):
        return f"JSON nesting deeper than {limit} (MAX_JSON_DEPTH)"
    return None
