"""Code that cites the documentation cites pages of the site that exist, at headings that exist.

Every ``*.py`` file of the repository and the Makefile are scanned for ``docs/<page>.md`` and
``docs/<page>.md#<anchor>``; the page must be a file under docs/, and the anchor one MyST gives a
heading of that page (``myst_heading_anchors``: GitHub's slugs, up to h4). The generated reference
pages (settings, CLI, API, metrics, checks) are generated here to be checked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.docs.test_reference_docs import reference

ROOT = Path(__file__).resolve().parents[2]
CITATION = re.compile(r"(?<![\w/.-])(docs/[\w./-]+?\.md)(?:#([\w-]+))?")
SKIP = {".venv", ".e2e", "node_modules", "build", "_build", ".git", "__pycache__"}


def scanned() -> list[Path]:
    files = [ROOT / "Makefile"]
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT).parts
        if not SKIP.intersection(parts) and not any(p.startswith(".") for p in parts[:-1]):
            files.append(path)
    return files


def citations() -> list[tuple[str, str, str]]:
    """``(where, page, anchor)`` for every citation; ``anchor`` is "" for a whole page."""
    found = []
    for path in scanned():
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:  # a scratch file someone removed meanwhile
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for m in CITATION.finditer(line):
                where = f"{path.relative_to(ROOT)}:{number}"
                found.append((where, m.group(1), m.group(2) or ""))
    return found


GENERATED = {
    f"docs/reference/{name}": getattr(reference, name.removesuffix(".md") + "_page")
    for name in reference.PAGES
}


def anchors_of(page: str, cache: dict[str, set[str]]) -> set[str]:
    if page not in cache:
        text = GENERATED[page]() if page in GENERATED else (ROOT / page).read_text("utf-8")
        cache[page] = reference.heading_anchors(text)
    return cache[page]


def test_code_cites_documentation_pages() -> None:
    """The scan finds what it is for (a regex that matched nothing would pass everything)."""
    cited = {page for _, page, _ in citations()}
    assert len(cited) >= 5, cited
    assert not {p for p in cited if p.startswith("docs/_build")}


def test_every_cited_page_and_anchor_exists(db: Any) -> None:
    cache: dict[str, set[str]] = {}
    problems = []
    for where, page, anchor in citations():
        if page not in GENERATED and not (ROOT / page).is_file():
            problems.append(f"{where}: {page} does not exist")
        elif anchor and anchor not in anchors_of(page, cache):
            problems.append(f"{where}: {page} has no heading with anchor #{anchor}")
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Running it in production", "running-it-in-production"),
        ("`MAX_BODY_BYTES`", "max_body_bytes"),
        ("Why is my run stuck?", "why-is-my-run-stuck"),
        ("Celery (worker & beat)", "celery-worker--beat"),
    ],
)
def test_anchors_are_the_slugs_myst_gives_headings(heading: str, anchor: str) -> None:
    assert anchor in reference.heading_anchors(f"# Page\n\n## {heading}\n")


def test_a_repeated_heading_gets_a_numbered_anchor() -> None:
    assert {"page", "setup", "setup-1"} == reference.heading_anchors(
        "# Page\n\n## Setup\n\n## Setup\n"
    )
