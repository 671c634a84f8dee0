"""A fast local HTTP push receiver for the drain benchmark: answers every POST with 204 and counts
them; ``GET /count`` answers the count. Run as ``python bench/receiver.py PORT``."""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

received = 0


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global received
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    body = b""
    if scope["method"] == "POST":
        received += 1
        status = 204
    else:
        status, body = 200, str(received).encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        log_level="warning",
        access_log=False,
        lifespan="off",
    )
