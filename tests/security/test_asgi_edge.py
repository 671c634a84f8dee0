"""``POST /`` as the server answers it: the ASGI application itself, driven with ASGI messages
(no socket), so what is read from the client and when is observable."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from django.test import override_settings

from promises.models import Promise
from resonate_project.asgi import application
from tests.support.factories import FAR


def scope(headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
    }


def run(headers: dict[str, str], chunks: list[bytes]) -> tuple[int, dict[str, Any], int]:
    """Send ``chunks`` as the body; return the status, the reply and how many chunks were read."""
    pending = list(chunks)
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(application(scope(headers), receive, send))
    status = sent[0]["status"]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return status, json.loads(body), read


JSON = {"content-type": "application/json", "host": "localhost:8001"}


@pytest.mark.django_db(transaction=True)
def test_the_body_limit_is_enforced_while_reading() -> None:
    """Finding: the 10 MiB limit was checked after the whole body was buffered."""
    chunks = [b"x" * 100] * 50  # 5,000 bytes in 50 chunks; the limit is 250
    with override_settings(RESONATE={"MAX_BODY_BYTES": 250}):
        status, reply, read = run(JSON, chunks)
    assert status == 413
    assert "MAX_BODY_BYTES" in reply["data"]
    assert read == 3  # stopped at the first chunk past the limit


@pytest.mark.django_db(transaction=True)
def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    with override_settings(RESONATE={"MAX_BODY_BYTES": 250}):
        status, _, read = run({**JSON, "content-length": "5000"}, [b"x" * 100] * 50)
    assert (status, read) == (413, 0)


@pytest.mark.django_db(transaction=True)
def test_forged_requests_are_refused_by_the_server_itself() -> None:
    body = json.dumps(
        {"kind": "promise.create", "head": {}, "data": {"id": "forged", "timeoutAt": FAR}}
    ).encode()
    status, reply, read = run({"content-type": "text/plain", "host": "localhost:8001"}, [body])
    assert (status, read) == (400, 0)
    assert "application/json" in reply["data"]
    status, _, read = run({**JSON, "origin": "https://evil.example"}, [body])
    assert (status, read) == (403, 0)
    status, _, _ = run({**JSON, "origin": "http://localhost:8001"}, [body])
    assert status == 200
    assert list(Promise.objects.values_list("id", flat=True)) == ["forged"]


@pytest.mark.django_db(transaction=True)
def test_the_authorization_header_reaches_the_envelope() -> None:
    from resonate_project.access.credentials import credential_create

    _, secret = credential_create(name="w", now=1, prefix="w/")
    body = json.dumps({"kind": "promise.get", "head": {}, "data": {"id": "w/1"}}).encode()
    with override_settings(RESONATE={"AUTH": "required", "WEB_THREADS": 0}):
        assert run(JSON, [body])[0] == 401
        assert run({**JSON, "authorization": f"Bearer {secret}"}, [body])[0] == 404


@pytest.mark.django_db(transaction=True)
def test_a_host_outside_allowed_hosts_is_refused() -> None:
    """DNS rebinding makes a foreign page same-origin; its Host header still names it."""
    body = json.dumps({"kind": "promise.get", "head": {}, "data": {"id": "x"}}).encode()
    rebound = {"content-type": "application/json", "host": "evil.example:8001"}
    status, reply, read = run({**rebound, "origin": "http://evil.example:8001"}, [body])
    assert (status, read) == (400, 0)
    assert "ALLOWED_HOSTS" in reply["data"]
    assert run(JSON, [body])[0] == 404
