"""The generated reference pages (docs/_ext/reference.py) list everything there is: every
``ResonateSettings`` field, every sub-command and option of the project's management commands,
every path and method ``/api/schema/`` serves, every metric and every system check id.

What the pages must hold is found here independently of the generator (the parsers walked, the
schema fetched over HTTP, the metric names and check ids read from the source with a regex), so
a setting, command, route, metric or check the generator missed fails here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.core.management import load_command_class
from django.test import Client

from resonate_project.core.conf import ResonateSettings, env_variable

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["resonate_project", "promises", "tasks_app", "schedules", "outbox"]


def load_reference() -> ModuleType:
    path = ROOT / "docs" / "_ext" / "reference.py"
    spec = importlib.util.spec_from_file_location("reference", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("reference", module)
    spec.loader.exec_module(module)
    return module


reference = load_reference()


def source_text() -> str:
    return "\n".join(
        p.read_text(encoding="utf-8")
        for package in SOURCES
        for p in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in p.parts
    )


def headings(page: str) -> list[str]:
    return [line.lstrip("#").strip().strip("`") for line in page.splitlines() if line[:1] == "#"]


def section(page: str, title: str) -> str:
    """The text under the heading ``title``, up to the next heading."""
    lines = page.split("\n")
    start = next(i for i, line in enumerate(lines) if line[:1] == "#" and headings(line) == [title])
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1] == "#"), len(lines))
    return "\n".join(lines[start + 1 : end])


@pytest.fixture(scope="module")
def written(
    tmp_path_factory: pytest.TempPathFactory, django_db_setup: Any, django_db_blocker: Any
) -> dict[str, str]:
    """Every page, as the docs build writes it (the metrics page reads the test database)."""
    out = tmp_path_factory.mktemp("reference")
    with django_db_blocker.unblock():
        paths = reference.write_pages(out)
    return {p.name: p.read_text(encoding="utf-8") for p in paths}


def test_the_five_pages_are_written_and_build_without_a_toctree(written: dict[str, str]) -> None:
    assert sorted(written) == sorted(reference.PAGES)
    for name, text in written.items():
        # orphan: the build is clean before the toctree lists the page
        assert text.startswith("---\norphan: true\n---\n"), name
        assert text.count("\n# ") == 1, name  # one title


def test_every_setting_is_on_the_settings_page_with_its_default_and_variable(
    written: dict[str, str],
) -> None:
    page = written["settings.md"]
    titles = headings(page)
    for f in fields(ResonateSettings):
        assert f.name in titles, f.name
        entry = section(page, f.name)
        variable = env_variable(f.name)
        if variable:
            assert f"`{variable}`" in entry, f.name
        else:
            assert "none: only" in entry, f.name
        assert "- Default: `" in entry, f.name
        assert "- Type: `" in entry, f.name
    # the comment above the field, as written in conf.py
    assert "A larger body answers 413 and changes nothing" in page
    # the DEBUG surface is never switched on from the environment by the namespace itself
    assert env_variable("DEBUG") is None
    # the anchors a comment may cite: docs/reference/settings.md#max_body_bytes
    assert "max_body_bytes" in reference.heading_anchors(page)


def test_the_settings_page_lists_the_environment_the_standalone_server_reads(
    written: dict[str, str],
) -> None:
    page = written["settings.md"]
    names = set(
        re.findall(
            r"""(?:os\.environ\.get|_env_\w+|os\.getenv)\(\s*["']([A-Z][A-Z0-9_]+)["']""",
            source_text(),
        )
    )
    assert {"DATABASE_URL", "DJANGO_SECRET_KEY", "CELERY_BROKER_URL", "PORT"} <= names
    titles = headings(page)
    for name in names:
        assert name in titles, name


def leaves(parser: argparse.ArgumentParser, words: list[str]) -> list[tuple[list[str], Any]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(words, parser)]
    return [leaf for name, sub in subs[0].choices.items() for leaf in leaves(sub, [*words, name])]


@pytest.mark.parametrize(("app", "command"), [("promises", "resonate"), ("outbox", "serve")])
def test_every_sub_command_and_option_is_on_the_cli_page(
    written: dict[str, str], app: str, command: str
) -> None:
    page = written["cli.md"]
    parser = load_command_class(app, command).create_parser("manage.py", command)
    titles = headings(page)
    assert f"manage.py {command}" in titles
    found = leaves(parser, [command])
    assert len(found) >= (20 if command == "resonate" else 1)
    for words, leaf in found:
        text = section(page, " ".join(words) if len(words) > 1 else f"manage.py {command}")
        for action in leaf._actions:
            options = [o for o in action.option_strings if o not in DJANGO_OPTIONS]
            if (action.option_strings and not options) or isinstance(action, argparse._HelpAction):
                continue  # Django's own options, and --help
            name = ", ".join(options) or action.dest
            assert f"`{name}`" in text, (words, name)
            if action.help:
                assert action.help.split()[0] in text, (words, action.help)


DJANGO_OPTIONS = {
    "--version", "-v", "--verbosity", "--settings", "--pythonpath", "--traceback",
    "--no-color", "--force-color", "--skip-checks",
}  # fmt: skip


def test_every_path_and_method_the_server_serves_is_on_the_api_page(
    written: dict[str, str], client: Client, db: Any
) -> None:
    res = client.get("/api/schema/?format=json")
    assert res.status_code == 200
    schema = json.loads(res.content)
    titles = headings(written["api.md"])
    operations = [
        f"{method.upper()} {path}"
        for path, ops in schema["paths"].items()
        for method in ops
        if method in ("get", "post", "put", "patch", "delete")
    ]
    assert len(operations) >= 20
    for operation in operations:
        assert operation in titles, operation
    for name in schema["components"]["schemas"]:
        assert name in titles, name


def test_no_operation_is_described_by_a_docstring_it_inherits(client: Client, db: Any) -> None:
    """drf-spectacular fell back on a base class's docstring: every GET without one of its own
    read "Mixed into every API view before DRF's own classes." (rest/own.py)."""
    schema = json.loads(client.get("/api/schema/?format=json").content)
    from resonate_project.edges.rest.own import OwnSettings
    from resonate_project.edges.rest.views import ResourceView

    inherited = {(c.__doc__ or "").strip() for c in (OwnSettings, ResourceView)} - {""}
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            assert op.get("description", "").strip() not in inherited, (method, path)


def test_every_metric_is_on_the_metrics_page(written: dict[str, str]) -> None:
    names = set(
        re.findall(
            r"(?:Counter|Gauge|Histogram|Summary|MetricFamily)\(\s*\"(resonate_\w+)\"",
            source_text(),
        )
    )
    assert len(names) >= 15
    page = written["metrics.md"]
    titles = headings(page)
    for name in names:
        assert name in titles, name
    entry = section(page, "resonate_request")
    assert "counter" in entry
    assert "`resonate_request_total`" in entry
    assert "`kind`, `status`" in entry
    assert "read from the database at scrape time" in section(page, "resonate_promises")


def test_every_check_id_is_on_the_checks_page(written: dict[str, str]) -> None:
    ids = set(re.findall(r"id=\"((?:resonate|access)\.[CEWID]\d{3})\"", source_text()))
    assert {"resonate.E000", "resonate.E001", "access.E001", "resonate.E031"} <= ids
    page = written["checks.md"]
    titles = headings(page)
    for ident in ids:
        assert ident in titles, ident
    # the message and hint as the check writes them, with what it fills in marked
    entry = section(page, "resonate.E003")
    assert "RESONATE['{name}'] must be > 0" in entry
    entry = section(page, "resonate.E004")
    assert "Hint: `a push claim waits up to one timeout" in entry
