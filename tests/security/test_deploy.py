"""Deployment safety: ``serve`` binds loopback unless told otherwise and refuses a non-loopback
address without an explicit ``RESONATE_AUTH`` and a real ``SECRET_KEY``; ``check --deploy`` is
clean with the production environment docs/how-to/production.md documents; ``/ready`` keeps
the database's error text in the server log.

Every server these tests start listens on 127.0.0.1. The refusals run ``serve`` on a non-loopback
address with an out-of-range port, so that even a regression could not listen there: it would fail
in uvicorn without naming RESONATE_AUTH, and the test would fail.
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.test import Client, override_settings

from outbox.management.commands.serve import Command as ServeCommand
from promises.checks import check_resonate_settings
from resonate_project import __version__
from resonate_project.access.credentials import TOKEN_PREFIX
from resonate_project.runtime.bind import decide_bind, is_loopback
from tests.support.docs_blocks import block

ROOT = Path(__file__).resolve().parents[2]
STRONG_KEY = secrets.token_urlsafe(50)
DEV_KEY = "django-resonate-insecure-development-key"
NEVER_BINDS = "70000"  # beyond 65535: uvicorn cannot listen on it


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def closed_postgres_url() -> str:
    """A PostgreSQL URL on a 127.0.0.1 port nothing listens on (connections are refused)."""
    return f"postgresql://resonate@127.0.0.1:{free_port()}/resonate"


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any server setting, plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "RESONATE_", "CELERY_"))
        and k not in {"HOST", "PORT", "DATABASE_URL"}
    }
    return {**env, "DATABASE_URL": closed_postgres_url(), **extra}


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


PRODUCTION = "docs/how-to/production.md"


def documented_deployment() -> tuple[dict[str, str], list[str]]:
    """The production guide's deployment block: its ``export`` lines as a dict, and the commands
    after them."""
    env: dict[str, str] = {}
    commands: list[str] = []
    for line in block(PRODUCTION, "production-deploy").lines():
        words = shlex.split(line)
        if words[0] == "export":
            for word in words[1:]:
                key, _, value = word.partition("=")
                env[key] = value
        else:
            commands.append(line)
    return env, commands


@pytest.fixture(scope="module")
def production_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The production guide's deployment environment, with its placeholders filled in: the
    secret key, the JWT key file, and the hosts (db.internal, redis.internal) on 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    pem = tmp_path_factory.mktemp("jwt") / "jwt.pub"
    pem.write_bytes(
        key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    env, commands = documented_deployment()
    assert commands == [
        "python manage.py migrate",
        "python manage.py check --deploy --fail-level WARNING",
        "python manage.py serve --host 0.0.0.0 --port 8001",
    ]
    assert env["DJANGO_SECRET_KEY"] == "..."  # a placeholder the reader fills in
    assert env["RESONATE_JWT_PUBLIC_KEY"] == "/etc/resonate/jwt.pub"
    env["DJANGO_SECRET_KEY"] = STRONG_KEY
    env["RESONATE_JWT_PUBLIC_KEY"] = str(pem)
    for name in ("DATABASE_URL", "CELERY_BROKER_URL"):
        env[name] = env[name].replace("db.internal", "127.0.0.1:5432")
        env[name] = env[name].replace("redis.internal", "127.0.0.1")
    assert env["RESONATE_AUTH"] == "required"
    return env


# --- classifying addresses (literals only, nothing is resolved or connected) ---------------------


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("::ffff:127.0.0.1", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.1.2.3", False),
        ("192.168.1.1", False),
        ("8.8.8.8", False),
        ("128.0.0.1", False),
        ("localhost.example.com", False),
        ("resonate.internal", False),
    ],
)
def test_loopback_classification_of_literals(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


# --- serve's decision ----------------------------------------------------------------------------


def test_default_host_is_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOST", raising=False)
    options = ServeCommand().create_parser("manage.py", "serve").parse_args([])
    assert options.host == "127.0.0.1"
    decision = decide_bind(options.host, auth="", secret_key=DEV_KEY, allowed_hosts=["localhost"])
    assert decision.refusals == ()
    assert decision.warnings == ()


def test_host_env_var_sets_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOST", "::1")
    assert ServeCommand().create_parser("manage.py", "serve").parse_args([]).host == "::1"


@pytest.mark.parametrize("host", ["0.0.0.0", "10.0.0.5", "::"])
def test_serve_refuses_a_non_loopback_address_with_auth_unset(host: str) -> None:
    env = clean_env(DJANGO_SECRET_KEY=STRONG_KEY)
    res = manage("serve", "--no-embedded", "--host", host, "--port", NEVER_BINDS, env=env)
    assert res.returncode != 0
    assert "RESONATE_AUTH=off" in res.stderr
    assert "RESONATE_AUTH=required" in res.stderr
    assert f"refusing to serve on {host}" in res.stderr
    assert "serving on" not in res.stdout


def test_serve_refuses_a_non_loopback_address_with_the_development_key() -> None:
    env = clean_env(RESONATE_AUTH="required")
    res = manage("serve", "--no-embedded", "--host", "0.0.0.0", "--port", NEVER_BINDS, env=env)
    assert res.returncode != 0
    assert "DJANGO_SECRET_KEY" in res.stderr
    assert "RESONATE_AUTH" not in res.stderr
    assert "serving on" not in res.stdout


def test_auth_off_on_a_public_address_starts_with_a_warning() -> None:
    decision = decide_bind(
        "0.0.0.0", auth="off", secret_key=STRONG_KEY, allowed_hosts=["resonate.example.com"]
    )
    assert decision.refusals == ()
    assert len(decision.warnings) == 1
    assert "RESONATE_AUTH=off" in decision.warnings[0]


def test_auth_required_on_a_public_address_starts() -> None:
    decision = decide_bind(
        "10.0.0.5", auth="required", secret_key=STRONG_KEY, allowed_hosts=["resonate.example.com"]
    )
    assert decision.refusals == ()
    assert decision.warnings == ()


@pytest.mark.parametrize("auth", ["", "off", "required"])
def test_a_public_address_with_the_development_key_is_refused_whatever_the_auth(
    auth: str,
) -> None:
    decision = decide_bind("0.0.0.0", auth=auth, secret_key=DEV_KEY, allowed_hosts=["*"])
    assert any("DJANGO_SECRET_KEY" in refusal for refusal in decision.refusals)


def test_a_public_address_with_only_loopback_allowed_hosts_warns() -> None:
    decision = decide_bind(
        "0.0.0.0", auth="required", secret_key=STRONG_KEY, allowed_hosts=["localhost", "[::1]"]
    )
    assert decision.refusals == ()
    assert ["DJANGO_ALLOWED_HOSTS" in w for w in decision.warnings] == [True]


# --- the AUTH setting ----------------------------------------------------------------------------


@pytest.mark.parametrize("auth", ["", "off", "required"])
def test_valid_auth_values_pass_the_checks(auth: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RESONATE_AUTH", raising=False)
    with override_settings(RESONATE={"AUTH": auth}):
        assert check_resonate_settings(None) == []


def test_an_invalid_auth_value_is_check_error_e010() -> None:
    res = manage("check", env=clean_env(RESONATE_AUTH="yes"))
    assert res.returncode != 0
    assert "resonate.E010" in res.stderr
    assert "'yes'" in res.stderr
    # serve runs the checks first, so it stops there too, even on loopback.
    res = manage("serve", "--no-embedded", "--port", NEVER_BINDS, env=clean_env(RESONATE_AUTH="1"))
    assert res.returncode != 0
    assert "resonate.E010" in res.stderr


# --- check --deploy ------------------------------------------------------------------------------


def test_check_deploy_is_clean_with_the_documented_environment(
    production_env: dict[str, str],
) -> None:
    res = manage("check", "--deploy", "--fail-level", "WARNING", env=clean_env(**production_env))
    assert res.returncode == 0, res.stderr
    assert "System check identified no issues" in res.stdout
    assert res.stderr == ""


def test_check_deploy_without_a_secret_key_flags_the_development_key(
    production_env: dict[str, str],
) -> None:
    env = clean_env(**production_env)
    del env["DJANGO_SECRET_KEY"]
    res = manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert res.returncode != 0
    assert "security.W009" in res.stderr
    assert "1 issue" in res.stderr
    # Development (no --deploy) stays clean with the fixed key.
    assert manage("check", "--fail-level", "WARNING", env=clean_env()).returncode == 0


def test_the_documented_proxy_header_is_parsed(production_env: dict[str, str]) -> None:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SECURE_PROXY_SSL_HEADER, s.ALLOWED_HOSTS, s.SECURE_SSL_REDIRECT)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**clean_env(**production_env), "DJANGO_SETTINGS_MODULE": "resonate_project.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https') ['resonate.example.com'] True"


# --- Host validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "status"), [("127.0.0.1:8001", 200), ("localhost:8001", 200), ("rebound.test", 400)]
)
def test_default_allowed_hosts_refuse_a_rebound_name(host: str, status: int) -> None:
    # A page whose DNS name was rebound to 127.0.0.1 still sends its own name as Host.
    assert Client().get("/health", HTTP_HOST=host).status_code == status


# --- a real server on the default host, its database unreachable ---------------------------------


class Server:
    def __init__(self, proc: subprocess.Popen[str], url: str, log: Path, db_url: str) -> None:
        self.proc, self.url, self.log, self.db_url = proc, url, log, db_url


@pytest.fixture(scope="module")
def server_without_database(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from serve_without_database(tmp_path_factory)


@pytest.fixture(scope="module")
def secured_server_without_database(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Server]:
    yield from serve_without_database(tmp_path_factory, RESONATE_AUTH="required")


def serve_without_database(
    tmp_path_factory: pytest.TempPathFactory, **extra: str
) -> Iterator[Server]:
    port = free_port()
    db_url = closed_postgres_url()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    env = clean_env(DATABASE_URL=db_url, PORT=str(port), **extra)  # no --host, no HOST
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--no-embedded"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"serve exited\n{log.read_text()}"
            try:
                httpx.get(url + "/health", timeout=1)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, f"serve never answered\n{log.read_text()}"
                time.sleep(0.1)
        yield Server(proc, url, log, db_url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_serve_without_host_answers_on_loopback(server_without_database: Server) -> None:
    res = httpx.get(server_without_database.url + "/health", timeout=5)
    assert res.json() == {"status": "ok", "version": __version__}
    assert f"serving on {server_without_database.url} " in server_without_database.log.read_text()


def test_ready_hides_the_database_error(server_without_database: Server) -> None:
    res = httpx.get(server_without_database.url + "/ready", timeout=10)
    assert res.status_code == 503
    assert res.json() == {"status": "unavailable", "error": "database unavailable"}
    port = server_without_database.db_url.rsplit(":", 1)[1].split("/")[0]
    # The driver's text, naming the database's address, is in the server's log instead.
    deadline = time.monotonic() + 10
    while "readiness probe: database unavailable" not in server_without_database.log.read_text():
        assert time.monotonic() < deadline, server_without_database.log.read_text()
        time.sleep(0.1)
    text = server_without_database.log.read_text()
    assert f"port {port} failed" in text


def test_a_request_while_the_database_is_down_is_a_retryable_503(
    server_without_database: Server,
) -> None:
    """Found in the chaos spot checks: during a PostgreSQL outage POST / answered 500."""
    body = {"kind": "promise.get", "head": {"corrId": "c"}, "data": {"id": "p"}}
    res = httpx.post(server_without_database.url + "/", json=body, timeout=30)
    assert res.status_code == 503
    reply = res.json()
    assert reply["head"]["status"] == 503
    assert reply["data"] == "database unavailable; retry the request"


def test_a_stream_opened_while_the_database_is_down_is_a_retryable_503(
    secured_server_without_database: Server,
) -> None:
    """Found by the chaos run (issue 13): with auth required, ``/poll/`` looks a service
    credential up in the database, and answered 500 while PostgreSQL was down (or restarting)
    where ``POST /`` answered 503; every SDK worker reconnecting its stream then saw a 500."""
    url = secured_server_without_database.url
    headers = {"Authorization": f"Bearer {TOKEN_PREFIX}not-checked-until-the-database-answers"}
    res = httpx.get(url + "/poll/workers/w1", headers=headers, timeout=30)
    assert res.status_code == 503
    assert res.headers["retry-after"] == "1"
    assert res.json() == {"error": "database unavailable; retry"}
    body = {"kind": "promise.get", "head": {"corrId": "c"}, "data": {"id": "p"}}
    res = httpx.post(url + "/", json=body, headers=headers, timeout=30)
    assert res.status_code == 503  # the same answer as POST /
