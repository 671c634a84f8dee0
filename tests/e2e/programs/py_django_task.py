"""Awaits a call enqueued through Django's Tasks framework by its result id (``resonate.get``);
prints LISTENING once it holds the handle, then RESULT <value>."""

from __future__ import annotations

import asyncio

from pyshared import config, connect, emit, shutdown


async def main() -> None:
    cfg = config()
    r = connect(cfg)
    handle = await r.get(cfg["id"])
    print("LISTENING", flush=True)
    emit(await handle.result())
    await shutdown(r)


asyncio.run(main())
