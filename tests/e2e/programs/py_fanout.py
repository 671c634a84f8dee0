"""Scenario 4: one workflow starts many ``ctx.rpc`` children at once, then gathers them.

role "helper": another worker of the same group (serves ``cube`` until SIGTERM).
role "main": runs ``fan_out`` and serves its children too.
"""

from __future__ import annotations

import asyncio

from pyshared import config, connect, emit, shutdown, until_terminated
from resonate.context import Context


def cube(ctx: Context, i: int) -> int:
    return i * i * i


async def fan_out(ctx: Context, n: int) -> dict[str, int]:
    children = [ctx.rpc("cube", i) for i in range(n)]
    values = [await child for child in children]
    return {"count": len(values), "sum": sum(values)}


async def main() -> None:
    cfg = config()
    r = connect(cfg)
    r.register(cube)
    if cfg["role"] == "helper":
        await until_terminated()
    else:
        r.register(fan_out)
        handle = r.run(cfg["id"], fan_out, cfg["n"])
        emit(await handle.result())
    await shutdown(r)


asyncio.run(main())
