"""The floor for create+settle: a bare ASGI app on the same stack as ``manage.py serve`` (uvicorn
with uvloop and httptools, psycopg's async connections binding on the client, two per process)
that answers ``promise.create`` and ``promise.settle`` with one statement each, on the same
table, and nothing else: no Django, no checks, no authentication, no metrics, no logging, no
conversion beyond ``json``. What it costs per request is about the least any Python server on
this stack can spend on these two requests, on this machine, today; ``bench/run.py`` runs it
beside the real server (section ``http``) and prints both against the ceiling.

Not a server to use: it refuses nothing it does not understand with more than a 400.

    FLOOR_DATABASE_URL=postgresql://... uvicorn bench.floor:app --workers 2
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

CONNECTIONS = 2
COLUMNS = (
    "id, state, param_headers, param_data, value_headers, value_data, tags, timeout_at, "
    "created_at, settled_at"
)
CREATE = (
    "INSERT INTO promises_promise (id, state, param_headers, param_data, value_headers, "
    "value_data, tags, timeout_at, created_at, settled_at, target, timer, external, branch) "
    "VALUES (%s, 'pending', %s, %s, NULL, NULL, %s, %s, %s, NULL, NULL, false, false, NULL) "
    f"ON CONFLICT DO NOTHING RETURNING {COLUMNS}"
)
SETTLE = (
    "UPDATE promises_promise SET state = %s, value_headers = %s, value_data = %s, "
    "settled_at = %s WHERE id = %s AND state = 'pending' AND timeout_at > %s "
    f"RETURNING {COLUMNS}"
)
NAMES = [c.strip() for c in COLUMNS.split(",")]
_idle: asyncio.Queue[psycopg.AsyncConnection[Any]] | None = None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def _start() -> None:
    global _idle
    _idle = asyncio.Queue()
    for _ in range(CONNECTIONS):
        conn = await psycopg.AsyncConnection.connect(
            os.environ["FLOOR_DATABASE_URL"],
            autocommit=True,
            cursor_factory=psycopg.AsyncClientCursor,
        )
        _idle.put_nowait(conn)


async def _answer(body: bytes) -> tuple[int, bytes]:
    try:
        env = json.loads(body)
        kind, data, corr = env["kind"], env["data"], env["head"]["corrId"]
    except (ValueError, KeyError, TypeError):
        return 400, b'{"error":"bad envelope"}'
    now = now_ms()
    if kind == "promise.create":
        param = data.get("param") or {}
        sql = CREATE
        params: list[Any] = [
            data["id"],
            Jsonb(param.get("headers") or {}),
            param.get("data"),
            Jsonb(data.get("tags") or {}),
            data["timeoutAt"],
            now,
        ]
    elif kind == "promise.settle":
        value = data.get("value") or {}
        sql = SETTLE
        state = data["state"]
        params = [state, Jsonb(value.get("headers") or {}), value.get("data"), now, data["id"], now]
    else:
        return 400, b'{"error":"unsupported kind"}'
    assert _idle is not None
    conn = await _idle.get()
    try:
        cursor = await conn.execute(sql, params)
        row = await cursor.fetchone()
    finally:
        _idle.put_nowait(conn)
    record = dict(zip(NAMES, row, strict=True)) if row else None
    status = 200 if row else 409
    out = {"kind": kind, "head": {"corrId": corr, "status": status}, "data": {"promise": record}}
    return 200, json.dumps(out).encode()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await _start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    if scope["path"] == "/ready":
        status, body = 200, b'{"status":"ready"}'
    else:
        status, body = await _answer(b"".join(chunks))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
