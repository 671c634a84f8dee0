"""One version, ``resonate_project.__version__``, everywhere one is shown: the package metadata
(pyproject reads it), the OpenAPI schema, ``GET /health``, the management commands'
``--version``, ``serve``'s start line, the ``User-Agent`` of HTTP push and of the CLI's
``--server`` mode, and the changelog's latest release; and the licence pyproject names is the
file in the repository."""

from __future__ import annotations

import importlib.metadata
import re
import threading
import tomllib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.management import load_command_class
from django.test import Client

from outbox.push import drain_push
from resonate_project import USER_AGENT, __version__
from resonate_project.edges import cli
from resonate_project.edges.rest.own import SCHEMA_SETTINGS
from tests.security.test_push import Receiver, push_settings, receivers, target
from tests.support.factories import Api

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

__all__ = ["receivers"]  # the fixture, used below


def test_pyproject_reads_the_version_from_the_package() -> None:
    project = PYPROJECT["project"]
    assert "version" not in project
    assert "version" in project["dynamic"]
    dynamic = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "resonate_project.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.dev\d+)?", __version__)


def test_the_installed_distribution_has_the_version() -> None:
    assert importlib.metadata.version("django-resonate") == __version__


def test_the_changelog_s_latest_release_is_the_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## \[([^\]]+)\]", text, flags=re.M)
    assert sections[0] == "Unreleased"
    assert sections[1] == __version__


def test_the_licence_file_is_the_one_pyproject_names() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_schema_and_health_show_the_version(client: Client, db: Any) -> None:
    assert SCHEMA_SETTINGS["VERSION"] == __version__
    schema = client.get("/api/schema/?format=json").json()
    assert schema["info"]["version"] == __version__
    assert client.get("/health").json() == {"status": "ok", "version": __version__}


@pytest.mark.parametrize(("app", "command"), [("promises", "resonate"), ("outbox", "serve")])
def test_the_commands_print_the_version(
    app: str, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = load_command_class(app, command).create_parser("manage.py", command)
    with pytest.raises(SystemExit):
        parser.parse_args(["--version"])
    assert capsys.readouterr().out.startswith(f"django-resonate {__version__} (Django ")


def test_push_says_who_is_calling(api: Api, receivers: Callable[..., Receiver]) -> None:
    hook = receivers()
    with push_settings():
        target(api, "p", hook.url())
        assert drain_push(100) == 1
    assert [g.headers.get("user-agent") for g in hook.got] == [f"django-resonate/{__version__}"]


class Envelopes:
    """A loopback server answering every envelope ``{"head": {"status": 200}, "data": {}}``."""

    def __init__(self) -> None:
        self.agents: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.agents.append(self.headers.get("User-Agent"))
                body = b'{"kind": "promise.get", "head": {"status": 404}, "data": "not found"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def envelopes() -> Iterator[Envelopes]:
    server = Envelopes()
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_the_cli_says_who_is_calling(envelopes: Envelopes) -> None:
    send = cli.remote(envelopes.url, token=None)
    assert send("promise.get", {"id": "p"}).status == 404
    assert envelopes.agents == [USER_AGENT]
