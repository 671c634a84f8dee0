"""The tutorial (docs/tutorial.md) and the README's quickstart, followed as a reader follows them:
``make run`` (the README's line and the tutorial's first step) serves on a fresh SQLite file; the
SDK is installed with the tutorial's two lines into a fresh virtualenv; ``payments.py`` serves
its group while ``checkout.py`` runs the workflow (a step, a sleep, an rpc) and prints what the
page says; the README's quickstart prints ``HELLO WORLD``; the tutorial's CLI lines show the call
tree the page shows; its ``createsuperuser`` line makes the account the admin then signs in with,
and the pages it names list the run.

The only changes to what the pages show: the port (``localhost:8001`` is whatever port is free)
and the database file (``DATABASE_URL``, which ``make run`` honours), so a developer's own
``make run`` is neither needed nor disturbed.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.docs_blocks import ROOT, block, blocks

from . import tools

TUTORIAL = "docs/tutorial.md"
README = "README.md"
WAIT = 90.0  # seconds: make run on a loaded machine migrates and collects static files first


def unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and a tool is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reader_env(tmp: Path, port: int) -> dict[str, str]:
    """A reader's shell: no server settings of the test run, the tutorial's database and port."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "DJANGO_", "PYTEST_", "CELERY_", "VIRTUAL_ENV"))
        and k not in {"DATABASE_URL", "HOST", "PORT"}
    }
    env["DATABASE_URL"] = f"sqlite:///{tmp / 'tutorial.sqlite3'}"
    env["PORT"] = str(port)
    return env


def bash(script: str, cwd: Path, env: dict[str, str], timeout: float = 120) -> str:
    done = subprocess.run(
        ["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{script}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def start(line: str, cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["bash", "-c", line],
        cwd=cwd,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # make's children too are stopped with the group
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + WAIT
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"make run did not listen\n{log.read_text()}"
            time.sleep(0.3)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, dict[str, str]]]:
    """``make run``, as the README's first line and the tutorial's first step say."""
    readme_run = block(README, "readme-make").lines()[0]
    assert block(TUTORIAL, "tutorial-run").lines() == [readme_run] == ["make run"]
    tmp = tmp_path_factory.mktemp("tutorial")
    port = free_port()
    env = reader_env(tmp, port)
    log = tmp / "make-run.log"
    server = start(readme_run, ROOT, env, log)
    try:
        wait_for_port(port, server, log)
        yield tmp, port, env
    finally:
        stop(server)


@pytest.fixture(scope="module")
def sdk_venv(served: tuple[Path, int, dict[str, str]]) -> Path:
    """The tutorial's two install lines, in the reader's directory; ``python3.12`` is whichever
    Python >= 3.12 this machine has, under that name."""
    tmp, _, env = served
    try:
        python = tools.find_python()
    except tools.Missing as exc:
        unavailable(str(exc))
        raise
    shims = tmp / "shims"
    shims.mkdir()
    (shims / "python3.12").symlink_to(python)
    lines = block(TUTORIAL, "tutorial-sdk-install").lines()
    assert lines[0].startswith("python3.12 -m venv sdk-venv"), lines
    shell_env = {**env, "PATH": f"{shims}{os.pathsep}{env['PATH']}"}
    for line in lines:
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=tmp,
            env=shell_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            unavailable(f"{line}: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return tmp / "sdk-venv"


def program(name: str, port: int) -> str:
    code = block(TUTORIAL if name.startswith("tutorial") else README, name).text
    assert "http://localhost:8001" in code, name
    return code.replace("http://localhost:8001", f"http://localhost:{port}")


def test_the_tutorial_runs_as_written(
    served: tuple[Path, int, dict[str, str]], sdk_venv: Path
) -> None:
    tmp, port, env = served
    (tmp / "payments.py").write_text(program("tutorial-payments", port))
    (tmp / "checkout.py").write_text(program("tutorial-checkout", port))
    (payments_line,) = block(TUTORIAL, "tutorial-payments-start").lines()
    (checkout_line,) = block(TUTORIAL, "tutorial-checkout-start").lines()
    payments = start(payments_line, tmp, env, tmp / "payments.log")
    try:
        out = bash(checkout_line, tmp, env, timeout=90)
    finally:
        stop(payments)
    page = (ROOT / TUTORIAL).read_text()
    printed = re.search(r"After about two seconds it prints\n`(\{.*?\})`", page, re.S)
    assert printed, "the tutorial no longer says what checkout.py prints"
    assert out.strip() == printed.group(1).replace("\n", " ")
    assert "payments: ready" in (tmp / "payments.log").read_text()
    # Run again: the same answer from the durable promise, with no worker of "payments" left.
    assert bash(checkout_line, tmp, env, timeout=60).strip() == out.strip()

    # The command line, as step 5 shows it (its first line activates the project's venv).
    cli = block(TUTORIAL, "tutorial-cli")
    out = bash(cli.text, ROOT, env)
    shown = next(b for b in blocks(TUTORIAL) if b.lang == "text" and b.line > cli.line)
    assert shown.text.strip() in out, out
    assert "resonate:target=poll://any@shop" in out
    assert re.search(r"^order-1:3\s+fulfilled", out, re.M), out

    # Step 1's page at /, in a browser.
    page_req = urllib.request.Request(f"http://127.0.0.1:{port}/", headers={"Accept": "text/html"})
    with urllib.request.urlopen(page_req, timeout=30) as res:
        root = res.read().decode()
    assert 'href="/admin/"' in root, root[:2000]

    # The admin, as step 6 shows it.
    superuser = block(TUTORIAL, "tutorial-superuser").text
    bash("source .venv/bin/activate\n" + superuser, ROOT, env)
    password = re.search(r"DJANGO_SUPERUSER_PASSWORD=(\S+)", superuser)
    assert password
    admin = signed_in(port, "admin", password.group(1))
    promises = admin(f"/admin/promises/promise/?q={urllib.parse.quote('order-1')}")
    for id in ("order-1", "order-1:1", "order-1:2", "order-1:3"):
        assert f">{id}<" in promises or f"{id}/change/" in promises, id
    run = admin("/admin/promises/promise/order-1/run/")
    assert "order-1:3" in run  # the rpc, on the run's timeline
    assert "order-1:3" in admin("/admin/tasks_app/task/")
    assert "Overview" in admin("/admin/overview/")
    admin("/admin/outbox/message/")  # answers 200 (what it lists depends on the SDK's exit)


def test_the_readme_quickstart_prints_hello_world(
    served: tuple[Path, int, dict[str, str]], sdk_venv: Path
) -> None:
    tmp, port, env = served
    (tmp / "hello.py").write_text(program("readme-quickstart", port))
    out = bash(f"{sdk_venv}/bin/python hello.py", tmp, env, timeout=90)
    assert out.strip() == "HELLO WORLD"


def test_the_readme_make_targets_exist() -> None:
    run_line, test_line = block(README, "readme-make").lines()
    assert (run_line, test_line) == ("make run", "make test")
    dry = subprocess.run(
        ["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert dry.returncode == 0, dry.stderr
    for step in ("ruff check", "mypy", "sphinx-build", "pytest"):
        assert step in dry.stdout, step


def signed_in(port: int, username: str, password: str) -> Callable[[str], str]:
    """GET pages of the admin as ``username``, signed in through its login form."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = f"http://127.0.0.1:{port}"
    page = opener.open(f"{base}/admin/login/", timeout=30).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, page[:2000]
    form = urllib.parse.urlencode(
        {
            "csrfmiddlewaretoken": token.group(1),
            "username": username,
            "password": password,
            "next": "/admin/",
        }
    ).encode()
    index = opener.open(f"{base}/admin/login/?next=/admin/", form, timeout=30).read().decode()
    assert "Log out" in index or "logout" in index, index[:2000]

    def get(path: str) -> str:
        with opener.open(f"{base}{path}", timeout=30) as res:
            assert res.status == 200, path
            return str(res.read().decode())

    return get
