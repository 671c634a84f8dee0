"""Sphinx configuration for the documentation site (`make docs`, strict: -W -n)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(HERE / "_ext")]

project = "django-resonate"
author = "django-resonate contributors"
copyright = "django-resonate contributors"

extensions = ["myst_parser"]
# reference pages (docs/_ext): settings, CLI, resource API, metrics and system checks, written
# from the code when the build starts (docs/_ext/reference.py); the version from the package.
extensions += ["reference"]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "observability/*"]  # the alert rules and dashboard are files

# Headings up to h4 get anchors, so `[x](page.md#anchor)` links are checked by the strict build.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]

nitpicky = True
html_theme = "furo"
html_title = "django-resonate"
html_static_path: list[str] = []
