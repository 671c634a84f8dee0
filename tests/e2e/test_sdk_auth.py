"""Both official SDKs, unmodified, against a server that requires a credential
(``RESONATE_AUTH=required``): a JWT signed by a key made here, and a service credential made with
``manage.py resonate credentials create``. Each SDK takes its token from ``RESONATE_TOKEN``."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.system.harness import PYTHON, ROOT, Outbox, Stack, free_port, migrate

from .conftest import _server_env
from .sdk import Programs, decode, unique

KEY = ec.generate_private_key(ec.SECP256R1())
PUBLIC_PEM = (
    KEY.public_key()
    .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    .decode()
)
GROUP = "secured"


def jwt_for(**claims: object) -> str:
    return jwt.encode({"exp": int(time.time()) + 3600, **claims}, KEY, algorithm="ES256")


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    logdir = tmp_path_factory.mktemp("e2e-auth")
    db = logdir / "resonate.sqlite3"
    env = _server_env(f"sqlite:///{db}", None)
    env.update(
        {
            "RESONATE_AUTH": "required",
            "RESONATE_JWT_PUBLIC_KEY": PUBLIC_PEM,
            "RESONATE_JWT_AUDIENCE": "resonate",
        }
    )
    migrate(env)
    stack = Stack("secured", f"http://127.0.0.1:{free_port()}", env, logdir, Outbox(sqlite_path=db))
    try:
        stack.start_web()
        yield stack
    finally:
        stack.stop()


def service_credential(stack: Stack, name: str, *args: str) -> str:
    done = subprocess.run(
        [PYTHON, "manage.py", "resonate", "credentials", "create", name, *args],
        cwd=ROOT,
        env=stack.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.splitlines()[-1]


def programs_with(stack: Stack, token: str, logdir: Path) -> Programs:
    return Programs(stack, logdir, env={"RESONATE_TOKEN": token})


def test_the_server_refuses_requests_without_a_credential(secured: Stack) -> None:
    status, data = secured.call("promise.get", id="anything")
    assert status == 401
    assert "authentication required" in data
    res = httpx.get(f"{secured.base_url}/poll/{GROUP}/w1", timeout=10)
    assert res.status_code == 401


def test_a_group_limited_credential_streams_only_its_groups(secured: Stack) -> None:
    """Finding: any client could open /poll/<group>/<id> for any group and take its work."""
    token = jwt_for(aud="resonate", prefix="x-", groups=[GROUP])
    headers = {"Authorization": f"Bearer {token}"}
    res = httpx.get(f"{secured.base_url}/poll/other/w1", headers=headers, timeout=10)
    assert res.status_code == 403
    with httpx.stream("GET", f"{secured.base_url}/poll/{GROUP}/w1", headers=headers) as res:
        assert res.status_code == 200
        assert res.headers["content-type"].startswith("text/event-stream")
    # the same credential cannot act on a task outside its prefix either
    secured.token = token
    try:
        assert secured.call("task.acquire", id="y-1", version=1, pid="p", ttl=1000)[0] == 403
    finally:
        secured.token = None


def token_for(stack: Stack, credential: str, prefix: str) -> str:
    """A credential limited to ``prefix`` and the group the programs stream."""
    if credential == "jwt":
        return jwt_for(aud="resonate", prefix=prefix, groups=[GROUP])
    return service_credential(stack, unique(prefix), "--prefix", prefix, "--group", GROUP)


@pytest.mark.parametrize("credential", ["jwt", "service"])
@pytest.mark.parametrize("sdk", ["python", "typescript"])
def test_the_sdks_with_auth_required(
    secured: Stack, request: pytest.FixtureRequest, tmp_path: Path, sdk: str, credential: str
) -> None:
    prefix = "py-" if sdk == "python" else "ts-"
    programs = programs_with(secured, token_for(secured, credential, prefix), tmp_path)
    root = unique(f"{prefix}auth")
    cfg = {"id": root, "name": "auth", "ledger": str(tmp_path / "ledger")}
    try:
        if sdk == "python":
            programs.py_sdk = request.getfixturevalue("py_sdk")
            proc = programs.python("py_hello.py", group=GROUP, **cfg)
        else:
            programs.node_sdk = request.getfixturevalue("node_sdk")
            proc = programs.node("ts_hello.mjs", group=GROUP, **cfg)
        assert programs.result(proc) == "HELLO AUTH!"
    finally:
        programs.close()
    # the result is durable, read back with an admin credential
    secured.token = jwt_for(aud="resonate", role="admin")
    try:
        assert decode(secured.ok("promise.get", id=root)["promise"]) == "HELLO AUTH!"
    finally:
        secured.token = None
