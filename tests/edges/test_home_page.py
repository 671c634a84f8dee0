"""``GET /`` (issue #25, part 5): a browser gets a short page saying what the server is, with
links to the routes this configuration has; every other client keeps the envelope endpoint's
answer, byte for byte. tests/edges/test_static_files.py asks the same of a real ``manage.py
serve``."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client, override_settings

BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"
TODAY = {"error": "POST a {kind, head, data} envelope to this URL"}


def links(html: str) -> list[str]:
    return re.findall(r'<a href="(/[^"]*)"', html)


def test_a_browser_gets_a_page_linking_the_admin_the_api_docs_health_and_metrics(
    client: Client, db: Any
) -> None:
    reply = client.get("/", headers={"Accept": BROWSER})
    assert reply.status_code == 200
    assert reply["Content-Type"] == "text/html; charset=utf-8"
    page = reply.content.decode()
    assert "Resonate</a> durable-execution server" in page
    assert links(page) == [
        "/admin/",
        "/admin/overview/",
        "/api/docs/",
        "/health",
        "/ready",
        "/metrics",
    ]
    for link in links(page):  # each one is there (the admin's own pages redirect to sign-in)
        assert client.get(link).status_code in (200, 302), link


@pytest.mark.parametrize(
    "accept",
    [
        None,  # no Accept header: most HTTP libraries
        "*/*",  # curl, httpx, the SDKs
        "application/json",
        "application/json, text/html;q=0.5",  # JSON preferred
        "text/html;q=0",  # HTML refused
        "text/plain",
    ],
)
def test_every_other_client_keeps_the_json_answer(client: Client, accept: str | None) -> None:
    reply = client.get("/", headers={"Accept": accept} if accept is not None else {})
    assert reply.status_code == 405
    assert reply["Content-Type"] == "application/json"
    assert json.loads(reply.content) == TODAY


def test_another_method_keeps_the_json_answer(client: Client) -> None:
    assert client.put("/", headers={"Accept": BROWSER}).status_code == 405
    assert json.loads(client.delete("/", headers={"Accept": BROWSER}).content) == TODAY


def test_the_page_lists_no_metrics_when_they_are_off(client: Client, db: Any) -> None:
    with override_settings(RESONATE={"METRICS": False}):
        page = client.get("/", headers={"Accept": BROWSER}).content.decode()
    assert "/metrics" not in links(page)
    assert "/health" in links(page)


def test_a_host_page_links_only_the_routes_the_host_has(client: Client, db: Any) -> None:
    """A host that mounts the apps under /resonate/ with an admin, and no probes or metrics of
    the standalone server's: the page at the prefix links what exists."""
    with override_settings(ROOT_URLCONF="tests.support.embed_site"):
        reply = client.get("/resonate/", headers={"Accept": BROWSER})
    assert reply.status_code == 200
    page = reply.content.decode()
    assert links(page) == ["/admin/", "/resonate/api/docs/"]
    assert "<code>POST /resonate/</code>" in page
