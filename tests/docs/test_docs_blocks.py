"""Every shell and Python block a reader follows is run by a test as written.

The pages a reader copies from step by step (README.md, the tutorial, the how-to guides) name
each runnable block (``<!-- block: name -->`` before its fence,
tests/support/docs_blocks.py); each name is unique on its page and appears in some test, which
reads the block by that name and runs it.
A new block without a name, or one no test reads, fails here, naming the page and the line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.docs_blocks import ROOT, blocks

RUNNABLE = {"sh", "bash", "shell", "console", "python", "py", "pycon"}
STEP_BY_STEP = [
    "README.md",
    "docs/tutorial.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs/how-to").glob("*.md")),
]
EVERY_PAGE = [
    "README.md",
    *sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "docs").rglob("*.md")
        if "_build" not in p.parts and "_ext" not in p.parts
    ),
]
HERE = Path(__file__).resolve()
HELPERS = {HERE, ROOT / "tests/support/docs_blocks.py"}


def test_the_step_by_step_pages_exist() -> None:
    assert {"docs/how-to/production.md", "docs/how-to/embedding.md"} <= set(STEP_BY_STEP)
    for page in STEP_BY_STEP:
        assert (ROOT / page).is_file(), page


@pytest.mark.parametrize("page", STEP_BY_STEP)
def test_every_runnable_block_is_named(page: str) -> None:
    unnamed = [
        f"{page}:{b.line} ({b.lang})" for b in blocks(page) if b.lang in RUNNABLE and not b.name
    ]
    assert unnamed == [], "add <!-- block: name --> before each, and a test that runs it"


@pytest.mark.parametrize("page", EVERY_PAGE)
def test_block_names_are_unique_per_page(page: str) -> None:
    names = [b.name for b in blocks(page) if b.name]
    assert sorted(n for n in set(names) if names.count(n) > 1) == []


def test_every_named_block_is_read_by_a_test() -> None:
    sources = "\n".join(
        p.read_text() for p in sorted((ROOT / "tests").rglob("*.py")) if p.resolve() not in HELPERS
    )
    unread = [
        f"{page}:{b.line} {b.name}"
        for page in EVERY_PAGE
        for b in blocks(page)
        if b.name and f'"{b.name}"' not in sources
    ]
    assert unread == [], "no test reads these blocks by name"
