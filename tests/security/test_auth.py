"""Authentication and authorization on ``POST /`` and ``/api/`` (docs/how-to/auth.md).

Every test runs the real HTTP path (Django's test client) with ``RESONATE_AUTH=required``, JWTs
signed by keys made here, and service credentials made by the CLI or the service function.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from io import StringIO
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, override_settings

from promises.models import Promise
from resonate_project.access.credentials import credential_create
from resonate_project.access.models import ServiceCredential
from schedules.models import Schedule
from tests.support.factories import FAR

VERSION = "2026-04-01"
NOW_S = int(time.time())


def pem(public_key: Any) -> str:
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
ED_KEY = ed25519.Ed25519PrivateKey.generate()


def token(claims: dict[str, Any], key: Any = RSA_KEY, algorithm: str = "RS256") -> str:
    body = {"exp": NOW_S + 3600, **claims}
    return jwt.encode(body, key, algorithm=algorithm)


def settings_for(public: Any = None, **extra: Any) -> dict[str, Any]:
    return {"AUTH": "required", "JWT_PUBLIC_KEY": pem((public or RSA_KEY).public_key()), **extra}


@pytest.fixture
def required(db: Any) -> Iterator[None]:
    with override_settings(RESONATE=settings_for()):
        yield


def envelope(kind: str, data: Any, **head: Any) -> str:
    return json.dumps(
        {"kind": kind, "head": {"corrId": "c1", "version": VERSION, **head}, "data": data}
    )


def post(
    client: Client, kind: str, data: Any, bearer: str | None = None, **head: Any
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    res = client.post(
        "/", envelope(kind, data, **head), content_type="application/json", headers=headers
    )
    env = json.loads(res.content)
    assert env["head"]["status"] == res.status_code
    return res.status_code, env["data"]


def create(client: Client, id: str, bearer: str, **tags: str) -> int:
    data = {"id": id, "timeoutAt": FAR, "param": {}, "tags": tags}
    return post(client, "promise.create", data, bearer)[0]


ADMIN = token({"role": "admin", "sub": "ops"})
UNSIGNED = jwt.encode({"exp": NOW_S + 60, "role": "admin"}, None, algorithm="none")  # type: ignore[arg-type]


# --- the finding: POST / answered anyone -----------------------------------------------------


def test_post_root_needs_a_credential_when_auth_is_required(required: None, client: Client) -> None:
    """Finding: with the API token set, /api/ was 401 but promise.get over POST / answered."""
    assert create(client, "secret-1", ADMIN) == 200
    status, data = post(client, "promise.get", {"id": "secret-1"})
    assert status == 401
    assert "authentication required" in data
    assert client.get("/api/promises/secret-1").status_code == 401
    status, data = post(client, "promise.search", {})
    assert status == 401
    status, data = post(client, "task.search", {})
    assert status == 401
    assert post(client, "promise.get", {"id": "secret-1"}, ADMIN)[0] == 200


def test_a_bad_credential_is_401_and_changes_nothing(required: None, client: Client) -> None:
    for bad in ["garbage", "rsn_unknown", token({}, OTHER_RSA_KEY), "Bearer", ""]:
        status, _ = post(client, "promise.create", {"id": "x", "timeoutAt": FAR}, bad or None)
        assert status == 401, bad
    assert not Promise.objects.exists()


def test_head_auth_is_read_before_the_authorization_header(required: None, client: Client) -> None:
    limited = token({"prefix": "a-"})
    status, _ = post(client, "promise.create", {"id": "b-1", "timeoutAt": FAR}, ADMIN, auth=limited)
    assert status == 403  # head.auth (prefix a-) wins over the admin header
    status, _ = post(client, "promise.create", {"id": "a-1", "timeoutAt": FAR}, None, auth=limited)
    assert status == 200


def test_head_auth_must_be_a_string(required: None, client: Client) -> None:
    status, data = post(client, "promise.get", {"id": "x"}, None, auth=123)
    assert status == 400
    assert "head.auth" in data


def test_auth_off_ignores_credentials(db: Any, client: Client) -> None:
    with override_settings(RESONATE={"AUTH": "off"}):
        assert post(client, "promise.get", {"id": "nope"}, "garbage")[0] == 404
        assert post(client, "promise.get", {"id": "nope"})[0] == 404


# --- the JWT claim matrix ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "id", "status"),
    [
        ({"role": "admin"}, "anything", 200),
        ({"prefix": "team-a/"}, "team-a/1", 200),
        ({"prefix": "team-a/"}, "team-b/1", 403),
        ({"prefix": "team-a/", "role": "worker"}, "team-b/1", 403),
        ({}, "anything", 200),  # no prefix claim: every id, but not admin
    ],
)
def test_jwt_prefix_limits_every_id(
    required: None, client: Client, claims: dict[str, Any], id: str, status: int
) -> None:
    assert create(client, id, token(claims)) == status
    assert Promise.objects.filter(id=id).exists() == (status == 200)


@pytest.mark.parametrize(
    ("jwt_token", "settings", "message"),
    [
        (token({"exp": NOW_S - 10}), {}, "expired"),
        (token({"iss": "evil"}), {"JWT_ISSUER": "good"}, "issuer"),
        (token({}), {"JWT_ISSUER": "good"}, "'iss'"),
        (token({"aud": "evil"}), {"JWT_AUDIENCE": "resonate"}, "audience"),
        (token({}, OTHER_RSA_KEY), {}, "invalid token"),
        (UNSIGNED, {}, "algorithm"),
        (jwt.encode({"role": "admin"}, RSA_KEY, algorithm="RS256"), {}, "'exp'"),
        (token({"prefix": 7}), {}, "prefix"),
        (token({"groups": "default"}), {}, "groups"),
    ],
    ids=[
        "expired",
        "wrong-issuer",
        "missing-issuer",
        "wrong-audience",
        "bad-signature",
        "none-algorithm",
        "no-exp",
        "prefix-not-string",
        "groups-not-list",
    ],
)
def test_jwt_refusals_are_401(
    db: Any, client: Client, jwt_token: str, settings: dict[str, Any], message: str
) -> None:
    with override_settings(RESONATE=settings_for(**settings)):
        status, data = post(client, "promise.get", {"id": "x"}, jwt_token)
    assert status == 401
    assert message in data


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_hs256_signed_with_the_public_key_is_refused(db: Any, client: Client) -> None:
    """The classic algorithm confusion: the public PEM used as an HMAC secret."""
    secret = pem(RSA_KEY.public_key()).encode()
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64(json.dumps({"exp": NOW_S + 60, "role": "admin"}).encode())
    signature = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    forged = f"{header}.{payload}.{b64(signature)}"
    with override_settings(RESONATE=settings_for()):
        status, _ = post(client, "promise.get", {"id": "x"}, forged)
    assert status == 401


@pytest.mark.parametrize(
    ("key", "algorithm"),
    [(RSA_KEY, "PS256"), (RSA_KEY, "RS512"), (EC_KEY, "ES256"), (ED_KEY, "EdDSA")],
)
def test_asymmetric_key_types(db: Any, client: Client, key: Any, algorithm: str) -> None:
    with override_settings(RESONATE=settings_for(key)):
        status, _ = post(client, "promise.get", {"id": "x"}, token({}, key, algorithm))
    assert status == 404


def test_the_public_key_may_be_a_file_path(db: Any, client: Client, tmp_path: Any) -> None:
    path = tmp_path / "key.pem"
    path.write_text(pem(RSA_KEY.public_key()))
    with override_settings(RESONATE={"AUTH": "required", "JWT_PUBLIC_KEY": str(path)}):
        assert post(client, "promise.get", {"id": "x"}, ADMIN)[0] == 404


def test_without_a_jwt_key_jwts_are_refused(db: Any, client: Client) -> None:
    with override_settings(RESONATE={"AUTH": "required"}):
        status, data = post(client, "promise.get", {"id": "x"}, ADMIN)
    assert status == 401
    assert "JWT_PUBLIC_KEY" in data


# --- prefix on every id a request names -------------------------------------------------------


def test_prefix_covers_nested_and_secondary_ids(required: None, client: Client) -> None:
    limited = token({"prefix": "a/"})
    target = {"resonate:target": "poll://any@default"}
    assert create(client, "b/other", ADMIN, **{"resonate:external": "true"}) == 200
    assert create(client, "a/task", ADMIN, **target) == 200
    # the awaited id of a callback
    status, _ = post(
        client, "promise.register_callback", {"awaited": "b/other", "awaiter": "a/task"}, limited
    )
    assert status == 403
    # the promise a listener waits on
    status, _ = post(
        client,
        "promise.register_listener",
        {"awaited": "b/other", "address": "poll://uni@default/w"},
        limited,
    )
    assert status == 403
    # every heartbeat task id
    status, _ = post(
        client,
        "task.heartbeat",
        {"pid": "p", "tasks": [{"id": "a/task", "version": 1}, {"id": "b/other", "version": 1}]},
        limited,
    )
    assert status == 403
    # the action of a fenced create
    status, _ = post(
        client,
        "task.fence",
        {
            "id": "a/task",
            "version": 1,
            "action": {"kind": "promise.create", "data": {"id": "b/new", "timeoutAt": FAR}},
        },
        limited,
    )
    assert status == 403
    assert not Promise.objects.filter(id="b/new").exists()
    # a schedule's occurrence id template
    schedule = {"id": "a/s", "cron": "* * * * *", "promiseId": "b/{{.id}}", "promiseTimeout": 1}
    assert post(client, "schedule.create", schedule, limited)[0] == 403
    assert not Schedule.objects.exists()
    schedule["promiseId"] = "a/{{.id}}.{{.timestamp}}"
    assert post(client, "schedule.create", schedule, limited)[0] == 200


def test_searches_by_a_prefix_token_see_only_the_prefix(required: None, client: Client) -> None:
    for id in ["a/1", "a/2", "ab", "b/1"]:
        assert create(client, id, ADMIN, **{"resonate:target": "poll://any@default"}) == 200
    limited = token({"prefix": "a/"})
    status, data = post(client, "promise.search", {}, limited)
    assert status == 200
    assert [p["id"] for p in data["promises"]] == ["a/1", "a/2"]
    status, data = post(client, "task.search", {}, limited)
    assert [t["id"] for t in data["tasks"]] == ["a/1", "a/2"]
    # a narrower idPrefix is kept; a disjoint one is refused
    status, data = post(client, "promise.search", {"idPrefix": "a/2"}, limited)
    assert [p["id"] for p in data["promises"]] == ["a/2"]
    status, data = post(client, "promise.search", {"idPrefix": "b"}, limited)
    assert status == 403
    # pages continue inside the prefix
    status, data = post(client, "promise.search", {"limit": 1}, limited)
    status, data = post(client, "promise.search", {"limit": 1, "cursor": data["cursor"]}, limited)
    assert [p["id"] for p in data["promises"]] == ["a/2"]
    # an admin sees everything
    status, data = post(client, "promise.search", {}, ADMIN)
    assert [p["id"] for p in data["promises"]] == ["a/1", "a/2", "ab", "b/1"]


# --- service credentials -------------------------------------------------------------------------


def cli(*args: str) -> list[str]:
    out = StringIO()
    call_command("resonate", *args, stdout=out)
    return out.getvalue().splitlines()


def test_service_credentials_create_use_revoke_last_used(required: None, client: Client) -> None:
    lines = cli("credentials", "create", "billing", "--prefix", "bill/", "--group", "billing")
    secret = lines[-1]
    assert secret.startswith("rsn_")
    assert " " not in secret
    stored = ServiceCredential.objects.get(name="billing")
    assert secret not in json.dumps(
        {f.name: str(getattr(stored, f.name)) for f in stored._meta.fields}
    )
    assert stored.last_used_at is None
    assert create(client, "bill/1", secret) == 200
    assert create(client, "other/1", secret) == 403
    assert ServiceCredential.objects.get(name="billing").last_used_at is not None
    listed = "\n".join(cli("credentials", "list"))
    assert "billing" in listed
    assert "active" in listed
    assert secret not in listed
    assert cli("credentials", "revoke", "billing") == ["revoked credential billing"]
    status, data = post(client, "promise.get", {"id": "bill/1"}, secret)
    assert (status, data) == (401, "credential revoked")
    assert "revoked" in "\n".join(cli("credentials", "list"))


def test_credential_names_are_unique(required: None) -> None:
    cli("credentials", "create", "one")
    with pytest.raises(Exception, match="exists already"):
        cli("credentials", "create", "one")


def test_an_admin_credential_may_search_everything(required: None, client: Client) -> None:
    _, secret = credential_create(name="ops", now=1, admin=True)
    assert create(client, "z", secret) == 200
    assert post(client, "promise.search", {}, secret)[1]["promises"][0]["id"] == "z"


# --- the debug surface -------------------------------------------------------------------------


def test_debug_needs_an_admin_credential(db: Any, client: Client) -> None:
    """Finding: with RESONATE_DEBUG on, debug.reset (deletes everything) needed no credential."""
    with override_settings(RESONATE=settings_for(DEBUG=True)):
        assert create(client, "keep", ADMIN) == 200
        assert post(client, "debug.reset", {})[0] == 401
        assert post(client, "debug.reset", {}, token({"prefix": ""}))[0] == 403
        status, _ = post(
            client, "promise.get", {"id": "keep"}, token({}), **{"resonate:debug_time": 5}
        )
        assert status == 403
        assert Promise.objects.filter(id="keep").exists()
        assert post(client, "debug.reset", {}, ADMIN)[0] == 200
        assert not Promise.objects.exists()


# --- browser-forgeable requests ------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""],
)
def test_a_forged_browser_post_is_refused(db: Any, content_type: str) -> None:
    """Finding: a text/plain POST from any web page was processed."""
    body = envelope("promise.create", {"id": "forged", "timeoutAt": FAR})
    client = Client()
    if content_type:
        res = client.post("/", body, content_type=content_type)
    else:
        res = client.generic("POST", "/", body, content_type="")
    assert res.status_code == 400
    assert "Content-Type must be application/json" in json.loads(res.content)["data"]
    assert not Promise.objects.exists()


def test_a_foreign_origin_is_refused(db: Any, client: Client) -> None:
    body = envelope("promise.create", {"id": "forged", "timeoutAt": FAR})
    res = client.post("/", body, content_type="application/json", HTTP_ORIGIN="https://evil.test")
    assert res.status_code == 403
    assert not Promise.objects.exists()
    res = client.post("/", body, content_type="application/json", HTTP_ORIGIN="http://testserver")
    assert res.status_code == 200
    other = envelope("promise.create", {"id": "ops", "timeoutAt": FAR})
    with override_settings(RESONATE={"ALLOWED_ORIGINS": "https://ops.example.com"}):
        res = client.post(
            "/", other, content_type="application/json", HTTP_ORIGIN="https://ops.example.com"
        )
    assert res.status_code == 200


def test_json_with_a_charset_is_accepted(db: Any, client: Client) -> None:
    body = envelope("promise.get", {"id": "x"})
    res = client.post("/", body, content_type="application/json; charset=utf-8")
    assert res.status_code == 404


# --- the resource API ---------------------------------------------------------------------------


def test_the_resource_api_uses_the_same_credentials(required: None, client: Client) -> None:
    for id in ["a/1", "b/1"]:
        assert create(client, id, ADMIN) == 200
    limited = {"Authorization": f"Bearer {token({'prefix': 'a/'})}"}
    assert client.get("/api/promises").status_code == 401
    assert client.get("/api/promises", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    res = client.get("/api/promises", headers=limited)
    assert [p["id"] for p in res.json()["results"]] == ["a/1"]
    assert client.get("/api/promises/a/1", headers=limited).status_code == 200
    assert client.get("/api/promises/b/1", headers=limited).status_code == 403
    res = client.post(
        "/api/promises",
        json.dumps({"id": "b/2", "timeoutAt": FAR}),
        "application/json",
        headers=limited,
    )
    assert res.status_code == 403
    assert not Promise.objects.filter(id="b/2").exists()
    admin = {"Authorization": f"Bearer {ADMIN}"}
    assert len(client.get("/api/promises", headers=admin).json()["results"]) == 2


def test_schema_and_docs_need_a_credential_when_required(required: None, client: Client) -> None:
    assert client.get("/api/schema/").status_code == 401
    assert client.get("/api/docs/").status_code in (401, 403)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    assert client.get("/api/schema/", headers=admin).status_code == 200


def test_a_staff_session_may_use_the_api(required: None, client: Client) -> None:
    user = User.objects.create_user("ops", password="pw")
    client.force_login(user)
    assert client.get("/api/promises").status_code == 403
    user.is_staff = True
    user.save()
    assert client.get("/api/docs/").status_code == 200
    assert client.get("/api/promises").status_code == 403  # no view_promise (issue #23, 4)
    user.is_superuser = True
    user.save()
    assert client.get("/api/promises").status_code == 200


# --- the admin ---------------------------------------------------------------------------------


def test_the_admin_creates_a_credential_and_shows_its_token_once(
    required: None, admin_client: Client, client: Client
) -> None:
    res = admin_client.post(
        "/admin/access/servicecredential/add/",
        {"name": "worker", "prefix": "w/", "groups_text": "default, batch"},
    )
    assert res.status_code == 200
    assert "no-store" in res["Cache-Control"]
    page = res.content.decode()
    secret = page.split('id="credential-token"', 1)[1].split(">", 1)[1].split("<", 1)[0]
    assert secret.startswith("rsn_")
    stored = ServiceCredential.objects.get(name="worker")
    assert (stored.prefix, stored.groups, stored.admin) == ("w/", ["batch", "default"], False)
    assert create(client, "w/1", secret) == 200
    detail = admin_client.get(f"/admin/access/servicecredential/{stored.pk}/change/")
    assert secret not in detail.content.decode()
    res = admin_client.post(
        "/admin/access/servicecredential/",
        {"action": "revoke", "_selected_action": [stored.pk]},
    )
    assert res.status_code == 302
    assert post(client, "promise.get", {"id": "w/1"}, secret) == (401, "credential revoked")
