"""Awaits calls enqueued through Django's Tasks framework by their result ids
(``resonate.get``); prints LISTENING once it holds every handle, then RESULT with a list of
``{"value": ...}`` or ``{"error": <type>: <message>}``, one per id."""

from __future__ import annotations

import asyncio
from typing import Any

from pyshared import config, connect, emit, shutdown


async def main() -> None:
    cfg = config()
    r = connect(cfg)
    handles = [await r.get(id) for id in cfg["ids"]]
    print("LISTENING", flush=True)
    out: list[dict[str, Any]] = []
    for handle in handles:
        try:
            out.append({"value": await handle.result()})
        except Exception as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}"})
    emit(out)
    await shutdown(r)


asyncio.run(main())
