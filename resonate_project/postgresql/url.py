"""``DATABASE_URL`` as Django's database settings, libpq's multi-host form included.

dj-database-url reads one host and one port. libpq also takes a list,
``postgresql://user@db1:5432,db2:5432/name?target_session_attrs=read-write``: it tries each host
in turn and, with ``target_session_attrs=read-write``, keeps the first that accepts writes, so a
server reaches a promoted standby by itself. dj-database-url refuses that netloc; here the hosts
and ports are taken apart first and handed to libpq as its comma-separated ``host`` and ``port``
(``HOST`` and ``PORT``, which Django's PostgreSQL backend passes on unchanged).

``DATABASE_POOLER=transaction`` says that the URL names a pooler in transaction mode (PgBouncer's
``pool_mode = transaction``): one transaction's statements share a server connection, the next
transaction may get another. Two things then go: server-side cursors (``QuerySet.iterator`` would
declare a ``WITH HOLD`` cursor that outlives its transaction, on a server connection the next
fetch may not get) and prepared statements (named per server connection). Django's cursors bind
on the client and never prepare; ``prepare_threshold: None`` keeps it so if an OPTIONS change
turns server-side binding on.
"""

from __future__ import annotations

import re
from typing import Any

import dj_database_url

_HOST = re.compile(r"^(\[[^\]]*\]|[^:]*)(?::(\d*))?$")
POOLER_MODES = ("", "transaction", "session")


def parse(url: str, pooler: str = "", conn_max_age: int = 600) -> dict[str, Any]:
    """Django's ``DATABASES`` entry for ``url`` (pooler: ``DATABASE_POOLER``'s value)."""
    if pooler not in POOLER_MODES:
        raise ValueError(f"DATABASE_POOLER is {pooler!r}: one of transaction, session or empty")
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    names: list[str] = []
    ports: list[str] = []
    first = ""
    if sep and "," in hosts:
        for part in hosts.split(","):
            match = _HOST.match(part)
            if match is None or not match.group(1):
                raise ValueError(f"DATABASE_URL: cannot read host {part!r}")
            first = first or match.group(1)
            names.append(match.group(1).strip("[]"))
            ports.append(match.group(2) or "")
        url = f"{scheme}{sep}{userinfo}{at}{first}{slash}{tail}"
    db: dict[str, Any] = dict(
        dj_database_url.parse(url, conn_max_age=conn_max_age, conn_health_checks=False)
    )
    if names:
        db["HOST"] = ",".join(names)
        # libpq wants one port for all hosts or one per host; a host without one gets 5432.
        given = [p for p in ports if p]
        if given and len(set(ports)) == 1:
            db["PORT"] = given[0]
        elif given:
            db["PORT"] = ",".join(p or "5432" for p in ports)
        else:
            db["PORT"] = ""
    if pooler == "transaction" and db["ENGINE"] == "django.db.backends.postgresql":
        db["DISABLE_SERVER_SIDE_CURSORS"] = True
        db.setdefault("OPTIONS", {})["prepare_threshold"] = None
    return db
