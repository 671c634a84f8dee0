"""Where HTTP push may go, decided on the address as written (no DNS, no connection), and the
configuration mistakes the system checks catch. The drain's check of resolved IPs is in
``test_push.py``."""

from __future__ import annotations

import socket
from ipaddress import ip_address
from typing import Any

import pytest
from django.test import override_settings

from promises.checks import check_push_settings
from resonate_project.core.addresses import address_refusal, ip_refusal, parse_allowed, parse_poll

NOTHING = parse_allowed("")


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Classification reads the address only: any lookup or connection fails the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the address check looked something up or connected")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("http://10.0.0.1/", "is a private address"),
        ("http://172.16.5.4:8080/hook", "is a private address"),
        ("https://192.168.1.1/", "is a private address"),
        ("http://100.64.0.7/", "is a shared (CGNAT) address"),
        ("http://127.0.0.1:9000/", "is a loopback address"),
        ("http://127.8.9.10/", "is a loopback address"),
        ("http://169.254.169.254/latest/meta-data/", "is a link-local address"),
        ("http://0.0.0.0/", "is an unspecified address"),
        ("http://224.0.0.251/", "is a multicast address"),
        ("http://240.0.0.1/", "is a reserved address"),
        ("http://255.255.255.255/", "is a reserved address"),
        ("http://192.0.2.10/", "is a special-purpose address"),
        ("http://localhost:8000/", "names a loopback host"),
        ("http://LOCALHOST./", "names a loopback host"),
        ("http://api.localhost/", "names a loopback host"),
        ("http://metadata.google.internal/computeMetadata/v1/", "names a cloud metadata service"),
        ("http://metadata/", "names a cloud metadata service"),
        ("http://instance-data/latest/", "names a cloud metadata service"),
        ("http://[::1]:8080/", "is a loopback address"),
        ("http://[::]/", "is an unspecified address"),
        ("http://[fe80::1%25eth0]/", "is a link-local address"),
        ("http://[fd12:3456::1]/", "is a private (unique local) address"),
        ("http://[fec0::1]/", "is a site-local address"),
        ("http://[ff02::1]/", "is a multicast address"),
        ("http://[::ffff:127.0.0.1]/", "is a loopback address (IPv4-mapped)"),
        ("http://[::ffff:a9fe:a9fe]/", "is a link-local address (IPv4-mapped)"),
        ("http://[::ffff:10.1.2.3]/", "is a private address (IPv4-mapped)"),
        ("http://[64:ff9b::7f00:1]/", "is a loopback address (NAT64)"),
        ("http://[2002:a9fe:a9fe::1]/", "is a link-local address (6to4)"),
        ("http://2130706433/", "spells the IPv4 address 127.0.0.1 unusually"),
        ("http://0177.0.0.1/", "spells the IPv4 address 127.0.0.1 unusually"),
        ("http://0x7f.0.0.1/", "spells the IPv4 address 127.0.0.1 unusually"),
        ("http://0x7f000001/", "spells the IPv4 address 127.0.0.1 unusually"),
        ("http://127.1/", "spells the IPv4 address 127.0.0.1 unusually"),
        ("http://012.0.0.1/", "spells the IPv4 address 10.0.0.1 unusually"),
        ("http://1.2.3.4.5/", "has an invalid IPv4 host"),
        ("http://user:secret@hooks.example.com/", "may not carry credentials"),
        ("http://hooks.example.com\\@10.0.0.1/", "may not contain spaces, backslashes"),
        ("http:///path-only", "has no host"),
        ("http://[::1/", "is not a valid URL"),
        ("http://hooks.example.com:99999/", "is not a valid URL"),
        ("https://hooks.example.com/run", None),
        ("http://8.8.8.8/", None),
        ("http://[2606:4700:4700::1111]/", None),
        ("http://[::ffff:8.8.8.8]/", "is an IPv4-mapped address (write it as 8.8.8.8)"),
        ("http://[64:ff9b::808:808]/", None),
        ("http://172.32.0.1/", None),
        ("http://payments.internal/run", None),  # a name: its resolved IPs are checked on send
    ],
)
def test_push_destinations_are_classified_from_the_address_alone(
    address: str, reason: str | None
) -> None:
    refusal = address_refusal(address, NOTHING)
    if reason is None:
        assert refusal is None
    else:
        assert refusal is not None
        assert refusal.startswith(f"address {address} {reason}"), refusal


def test_a_refusal_says_how_to_allow_the_address() -> None:
    assert address_refusal("http://10.0.0.1/", NOTHING) == (
        "address http://10.0.0.1/ is a private address; allow it with RESONATE_PUSH_ALLOWED"
    )


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("http://127.0.0.1:9000/", "127.0.0.1"),
        ("http://[::ffff:127.0.0.1]/", "127.0.0.1"),
        ("http://10.20.30.40/", "10.0.0.0/8"),
        ("http://[fd00::5]/", "fd00::/8"),
        ("http://localhost:8000/", "localhost"),
        ("http://metadata.google.internal/", " Metadata.Google.Internal "),
        ("http://api.localhost/", "*.localhost"),
        ("http://a.b.localhost/", "other.example, *.localhost"),
    ],
)
def test_push_allowed_admits_hosts_wildcards_and_cidrs(address: str, allowed: str) -> None:
    assert address_refusal(address, NOTHING) is not None
    assert address_refusal(address, parse_allowed(allowed)) is None


@pytest.mark.parametrize(
    ("address", "allowed"),
    [
        ("http://10.0.0.3/", "10.0.0.1, 10.0.0.2"),
        ("http://127.0.0.2/", "127.0.0.1"),
        ("http://[::1]/", "127.0.0.1"),
        ("http://localhost/", "*.localhost"),  # a wildcard covers subdomains only
        ("http://metadata/", "metadata.google.internal"),
    ],
)
def test_push_allowed_admits_nothing_else(address: str, allowed: str) -> None:
    assert address_refusal(address, parse_allowed(allowed)) is not None


def test_resolved_ips_are_classified_like_literals() -> None:
    assert ip_refusal(ip_address("127.0.0.1")) == "a loopback address"
    assert ip_refusal(ip_address("::ffff:169.254.169.254")) == "a link-local address (IPv4-mapped)"
    assert ip_refusal(ip_address("93.184.216.34")) is None


@pytest.mark.parametrize(
    ("address", "routed"),
    [
        ("poll://uni@g/w1", ("uni", "g", "w1")),
        ("poll://any@g", ("any", "g", None)),
        ("poll://any@g/w1", ("any", "g", "w1")),
        ("poll://foo@g", None),
        ("poll://uni@g", None),
        ("poll://any@", None),
        ("poll://g", None),
    ],
)
def test_poll_addresses_follow_one_grammar(address: str, routed: Any) -> None:
    poll = parse_poll(address)
    assert (None if poll is None else (poll.mode, poll.group, poll.id)) == routed
    assert (address_refusal(address, NOTHING) is None) == (routed is not None)


# --- system checks ------------------------------------------------------------------------------


def ids(errors: list[Any]) -> set[str]:
    return {e.id for e in errors}


def test_the_removed_bearer_token_is_a_system_check_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "resonate.E020" not in ids(check_push_settings(None))
    monkeypatch.setenv("RESONATE_PUSH_BEARER_TOKEN", "secret")
    errors = [e for e in check_push_settings(None) if e.id == "resonate.E020"]
    assert len(errors) == 1
    assert "PUSH_CREDENTIALS" in str(errors[0].hint)
    assert "secret" not in f"{errors[0].msg} {errors[0].hint}"


@pytest.mark.parametrize(
    ("settings", "error"),
    [
        ({"PUSH_ALLOWED": "10.0.0.0/33"}, "resonate.E021"),
        ({"PUSH_ALLOWED": "*bad"}, "resonate.E021"),
        ({"PUSH_CREDENTIALS": "{not json"}, "resonate.E022"),
        ({"PUSH_CREDENTIALS": '["hooks.example.com"]'}, "resonate.E022"),
        ({"PUSH_CREDENTIALS": {"hooks.example.com": 1}}, "resonate.E022"),
        ({"PUSH_PER_HOST_CONCURRENCY": 0}, "resonate.E023"),
    ],
)
def test_malformed_push_settings_are_system_check_errors(
    settings: dict[str, Any], error: str
) -> None:
    with override_settings(RESONATE=settings):
        assert error in ids(check_push_settings(None))
    with override_settings(
        RESONATE={
            "PUSH_ALLOWED": "127.0.0.1, *.corp.example, 10.0.0.0/8, fd00::/8, hooks",
            "PUSH_CREDENTIALS": {"hooks.example.com": "Bearer x"},
        }
    ):
        assert ids(check_push_settings(None)) == set()
