"""``DATABASE_URL`` as the server reads it (resonate_project.postgresql.url): libpq's multi-host
form, which a failover needs, and ``DATABASE_POOLER=transaction`` behind PgBouncer. The
connections themselves are exercised in tests/system/test_pooler.py and by
``make chaos-failover``."""

from __future__ import annotations

import shlex

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from resonate_project.postgresql.url import parse
from tests.support.docs_blocks import block


def test_a_multi_host_url_reaches_libpq_as_its_host_and_port_lists() -> None:
    db = parse(
        "postgresql://app@10.0.0.1:5432,10.0.0.2:5433/resonate?target_session_attrs=read-write"
    )
    assert (db["HOST"], db["PORT"], db["NAME"], db["USER"]) == (
        "10.0.0.1,10.0.0.2",
        "5432,5433",
        "resonate",
        "app",
    )
    assert db["OPTIONS"]["target_session_attrs"] == "read-write"
    assert db["CONN_MAX_AGE"] == 600
    # libpq accepts what Django will hand it.
    info = conninfo_to_dict(make_conninfo(host=db["HOST"], port=db["PORT"], dbname=db["NAME"]))
    assert info["host"] == "10.0.0.1,10.0.0.2"


def test_hosts_on_one_port_or_none_and_ipv6() -> None:
    assert parse("postgresql://u@a:6000,b:6000/d")["PORT"] == "6000"
    assert parse("postgresql://u@a,b/d")["PORT"] == ""
    db = parse("postgresql://u@[::1]:5432,b/d")
    assert (db["HOST"], db["PORT"]) == ("::1,b", "5432,5432")


def test_a_single_host_url_is_read_as_before() -> None:
    db = parse("postgresql://postgres@127.0.0.1:5432/resonate")
    assert (db["HOST"], db["PORT"], db["DISABLE_SERVER_SIDE_CURSORS"]) == ("127.0.0.1", 5432, False)
    assert "prepare_threshold" not in db.get("OPTIONS", {})


def test_transaction_pooling_turns_off_server_side_cursors_and_prepared_statements() -> None:
    db = parse("postgresql://postgres@127.0.0.1:6432/resonate", pooler="transaction")
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert db["OPTIONS"]["prepare_threshold"] is None
    sqlite = parse("sqlite:///x.db", pooler="transaction")
    assert sqlite["DISABLE_SERVER_SIDE_CURSORS"] is False


def test_an_unknown_pooler_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="DATABASE_POOLER"):
        parse("postgresql://postgres@127.0.0.1/resonate", pooler="statement")


def _exports(name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in block("docs/how-to/production.md", name).lines():
        words = shlex.split(line)
        assert words[0] == "export", line
        for word in words[1:]:
            key, _, value = word.partition("=")
            env[key] = value
    return env


def test_the_production_guides_pgbouncer_settings_turn_off_what_pooling_breaks() -> None:
    env = _exports("production-pgbouncer")
    db = parse(env["DATABASE_URL"], env["DATABASE_POOLER"])
    assert (db["HOST"], db["PORT"]) == ("pgbouncer.internal", 6432)
    assert db["DISABLE_SERVER_SIDE_CURSORS"] is True
    assert db["OPTIONS"]["prepare_threshold"] is None


def test_the_production_guides_failover_url_names_both_hosts_for_libpq() -> None:
    db = parse(_exports("production-failover")["DATABASE_URL"])
    assert db["HOST"] == "db1.internal,db2.internal"
    assert db["PORT"] == "5432"
    assert db["OPTIONS"]["target_session_attrs"] == "read-write"
