"""Scenario 2: ``ctx.sleep`` between steps (durable timers: the workflow suspends and resumes)."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pyshared import config, connect, emit, shutdown
from resonate.context import Context


def announce(ctx: Context, n: int) -> str:
    return f"T-{n}"


async def countdown(ctx: Context, start: int, pause_ms: int) -> list[str]:
    said = []
    for n in range(start, 0, -1):
        said.append(await ctx.run(announce, n))
        if n > 1:
            await ctx.sleep(timedelta(milliseconds=pause_ms))
    said.append("liftoff")
    return said


async def main() -> None:
    cfg = config()
    r = connect(cfg)
    r.register(countdown)
    handle = r.run(cfg["id"], countdown, cfg["start"], cfg["pause_ms"])
    emit(await handle.result())
    await shutdown(r)


asyncio.run(main())
