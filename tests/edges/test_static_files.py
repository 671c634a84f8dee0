"""Static files as ``make run`` and production serve them (issue #25, part 1): a real ``manage.py
serve`` process, with ``DJANGO_DEBUG`` off and on, collects the admin's CSS and JS at start and
serves them (WhiteNoise); Chromium (Playwright, Debian's build) loads the admin's login, index, a
changelist and a change page, and nothing in any page's network log answers 400 or more.

Without Chromium the browser test is skipped with the reason, except under ``CI=true``, where
that is a failure. The server runs on a SQLite file and a STATIC_ROOT of its own."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
HOST = "127.0.0.1"
WAIT = 90.0  # seconds the server may take to start (and collect) on a loaded machine
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "correct horse battery staple"
PROMISE = "static-files-order-1"


def require_chromium() -> None:
    if os.access(CHROMIUM, os.X_OK):
        return
    reason = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason}; under CI=true the browser test must run")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    def __init__(self, url: str, static_root: Path, log: Path, debug: bool) -> None:
        self.url = url
        self.debug = debug
        self.static_root = static_root
        self.log = log


@pytest.fixture(scope="module", params=["off", "on"], ids=["DJANGO_DEBUG off", "DJANGO_DEBUG on"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """``manage.py serve`` as ``make run`` starts it: migrated first, nothing collected."""
    home = tmp_path_factory.mktemp("static-server")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESONATE_", "DJANGO_"))}
    env.update(
        DATABASE_URL=f"sqlite:///{home / 'db.sqlite3'}",
        DJANGO_STATIC_ROOT=str(home / "static"),
        DJANGO_DEBUG="true" if request.param == "on" else "false",
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
        CELERY_BROKER_URL="",
    )
    manage = [PYTHON, "manage.py"]
    subprocess.run([*manage, "migrate", "-v0"], cwd=ROOT, env=env, check=True, timeout=300)
    superuser = ["createsuperuser", "--noinput", "--username", "ops", "--email", "ops@example.com"]
    subprocess.run([*manage, *superuser], cwd=ROOT, env=env, check=True, timeout=120)
    create = ["resonate", "promises", "create", PROMISE, "--timeout", "1h", "--data", "{}"]
    subprocess.run([*manage, *create], cwd=ROOT, env=env, check=True, timeout=120)
    port = free_port()
    log_path = home / "serve.log"
    log = log_path.open("wb")
    argv = [*manage, "serve", "--host", HOST, "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + WAIT
        while True:
            assert proc.poll() is None, log_path.read_text()
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/health", timeout=2):
                break
            assert time.monotonic() < deadline, "manage.py serve did not start"
            time.sleep(0.2)
        yield Server(url, home / "static", log_path, debug=request.param == "on")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=20)
        log.close()


def test_serve_collects_the_static_files_before_it_listens(server: Server) -> None:
    manifest = json.loads((server.static_root / "staticfiles.json").read_text())
    assert "admin/css/base.css" in manifest["paths"]
    assert "collecting static files" in server.log.read_text()


def test_a_file_is_served_compressed_and_a_hashed_one_cached_for_good(server: Server) -> None:
    """With DJANGO_DEBUG the pages link plain names, read afresh from the apps' folders and not
    cached; without it, hashed names, cached for good."""
    manifest = json.loads((server.static_root / "staticfiles.json").read_text())
    name = "admin/css/base.css" if server.debug else manifest["paths"]["admin/css/base.css"]
    request = urllib.request.Request(
        f"{server.url}/static/{name}", headers={"Accept-Encoding": "gzip"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        cache = reply.headers["Cache-Control"]
        body = reply.read()
        if reply.headers["Content-Encoding"] == "gzip":
            body = gzip.decompress(body)
        else:
            assert server.debug, "a collected file is served gzip-compressed"
    assert "--body-bg" in body.decode()  # the admin's own stylesheet, not an error page
    assert ("max-age=0" in cache) if server.debug else ("immutable" in cache), cache


def test_the_admin_loads_every_stylesheet_and_script_it_links(server: Server) -> None:
    require_chromium()
    from playwright.sync_api import sync_playwright

    failures: list[str] = []
    loaded: dict[str, int] = {}

    def record(response: Any) -> None:
        loaded[response.url] = response.status
        if response.status >= 400:
            failures.append(f"{response.status} {response.url}")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("response", record)
            page.on("requestfailed", lambda r: failures.append(f"failed {r.url}"))

            def visit(path: str | None = None) -> None:
                if path is not None:
                    page.goto(f"{server.url}{path}")
                page.wait_for_load_state("networkidle")
                linked = page.evaluate(
                    """() => [...document.querySelectorAll('link[rel=stylesheet], script[src]')]
                        .map(e => e.href || e.src)"""
                )
                assert any(u.endswith(".css") for u in linked), page.url
                assert any(u.endswith(".js") for u in linked), page.url
                for asset in linked:
                    assert loaded.get(asset) in (200, 304), (page.url, asset, loaded.get(asset))
                # Styled: the admin's header has its colour (an unstyled page has none).
                header = page.evaluate(
                    "() => getComputedStyle(document.querySelector('#header')).backgroundColor"
                )
                assert header not in ("", "rgba(0, 0, 0, 0)"), page.url

            visit("/admin/login/")
            page.fill("#id_username", "ops")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_url(f"{server.url}/admin/")
            visit()
            visit("/admin/promises/promise/")
            page.click(f"#result_list a:text-is('{PROMISE}')")
            page.wait_for_url("**/change/")
            visit()
        finally:
            browser.close()
    assert failures == []


def test_the_served_root_answers_a_browser_with_a_page_and_a_client_with_json(
    server: Server,
) -> None:
    """GET / through the whole served stack (issue #25, part 5; tests/edges/test_home_page.py)."""
    browser = urllib.request.Request(f"{server.url}/", headers={"Accept": "text/html,*/*;q=0.8"})
    with urllib.request.urlopen(browser, timeout=10) as reply:
        assert reply.headers["Content-Type"] == "text/html; charset=utf-8"
        page = reply.read().decode()
    assert '<a href="/admin/">' in page
    assert '<a href="/api/docs/">' in page
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{server.url}/", timeout=10)
    assert refused.value.code == 405
    assert json.loads(refused.value.read()) == {
        "error": "POST a {kind, head, data} envelope to this URL"
    }


def test_a_static_root_that_cannot_be_written_stops_serve_with_what_to_do(tmp_path: Path) -> None:
    """Nothing collected and nowhere to collect to: serve refuses to start unstyled, naming the
    directory and the fix, without a traceback."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RESONATE_", "DJANGO_"))}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}",
        DJANGO_STATIC_ROOT=str(blocker / "static"),
        CELERY_BROKER_URL="",
    )
    argv = [PYTHON, "manage.py", "serve", "--host", HOST, "--port", str(free_port())]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert f"cannot collect the static files into {blocker / 'static'}" in done.stderr
    assert "DJANGO_STATIC_ROOT" in done.stderr
    assert "Traceback" not in done.stderr
