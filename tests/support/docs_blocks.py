"""The fenced code blocks of the README and the documentation site, by name.

A block a test runs is named by an HTML comment on the line before its fence (blank lines
between are allowed; GitHub and Sphinx render neither)::

    <!-- block: embedding-settings -->
    ```python
    ...
    ```

``block(page, name)`` is that block's text as a reader copies it, so a test runs exactly what the
page shows; a renamed or removed block fails the test that reads it, naming the page.
tests/docs/test_docs_blocks.py checks that every runnable block of the pages a reader follows step
by step is named, every name is unique per page and read by some test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A fence opens with ``` or ~~~ (three or more), optionally indented, then the language.
FENCE = re.compile(r"^(?P<indent>[ ]*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)[^\n]*$")
MARKER = re.compile(r"^\s*<!--\s*block:\s*(?P<name>[\w.-]+)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # the path from the repository root, e.g. "docs/how-to/embedding.md"
    line: int  # the fence's line, 1-based
    lang: str  # "sh", "python", ... ("" when the fence names none)
    name: str | None  # from the marker before the fence
    text: str  # the lines between the fences, the fence's own indentation removed

    def lines(self) -> list[str]:
        """The block's non-blank lines as a shell reads them: a comment (`` #`` outside quotes)
        and trailing blanks removed, the rest exactly as written."""
        out = []
        for line in self.text.splitlines():
            code = strip_comment(line).rstrip()
            if code.strip():
                out.append(code)
        return out


def strip_comment(line: str) -> str:
    """``line`` up to a shell comment: a ``#`` at the start or after a blank, outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


@cache
def _blocks(page: str) -> tuple[Block, ...]:
    lines = (ROOT / page).read_text().splitlines()
    found: list[Block] = []
    pending: str | None = None
    i = 0
    while i < len(lines):
        marker = MARKER.match(lines[i])
        fence = FENCE.match(lines[i])
        if marker:
            pending = marker.group("name")
        elif fence:
            indent, opener = len(fence.group("indent")), fence.group("fence")
            body: list[str] = []
            j = i + 1
            while j < len(lines) and not (
                lines[j].strip().startswith(opener) and lines[j].strip().strip(opener[0]) == ""
            ):
                body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
                j += 1
            text = "\n".join(body) + "\n" if body else ""
            found.append(Block(page, i + 1, fence.group("lang"), pending, text))
            pending = None
            i = j
        elif lines[i].strip():
            pending = None  # a marker names only the fence right after it
        i += 1
    return tuple(found)


def blocks(page: str) -> list[Block]:
    """Every fenced block of ``page`` (a path from the repository root), in order."""
    return list(_blocks(page))


def block(page: str, name: str) -> Block:
    """The block ``page`` names ``name``; an AssertionError naming both when there is none."""
    named = [b for b in _blocks(page) if b.name == name]
    assert named, f"{page} has no block named {name!r} (<!-- block: {name} --> before a fence)"
    assert len(named) == 1, f"{page} names {len(named)} blocks {name!r}"
    return named[0]


def text(page: str, name: str) -> str:
    """The text of ``page``'s block ``name``, as a reader copies it."""
    return block(page, name).text
