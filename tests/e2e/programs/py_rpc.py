"""Scenario 3: a workflow calls ``square``, which only a worker of another group registers.

role "worker": registers ``square`` in its group and serves until SIGTERM.
role "caller": registers only ``relay`` and runs it; ``relay`` targets the worker's group.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pyshared import config, connect, emit, shutdown, until_terminated
from resonate.context import Context


async def square(ctx: Context, x: int) -> dict[str, int]:
    return {"value": x * x, "pid": os.getpid()}


async def relay(ctx: Context, x: int, group: str) -> dict[str, Any]:
    answer = await ctx.options(target=group).rpc("square", x)
    return {"square": answer["value"], "worker_pid": answer["pid"], "caller_pid": os.getpid()}


async def main() -> None:
    cfg = config()
    r = connect(cfg)
    if cfg["role"] == "worker":
        r.register(square)
        await until_terminated()
    else:
        r.register(relay)
        handle = r.run(cfg["id"], relay, cfg["x"], cfg["worker_group"])
        emit(await handle.result())
    await shutdown(r)


asyncio.run(main())
