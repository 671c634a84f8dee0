"""Scenario 1: a workflow with two ``ctx.run`` steps."""

from __future__ import annotations

import asyncio

from pyshared import config, connect, emit, record, shutdown
from resonate.context import Context

LEDGER = ""


def greet(ctx: Context, name: str) -> str:
    record(LEDGER, f"greet {name}")
    return f"hello {name}"


async def shout(ctx: Context, text: str) -> str:
    return text.upper() + "!"


async def hello(ctx: Context, name: str) -> str:
    greeting = await ctx.run(greet, name)
    return await ctx.run(shout, greeting)


async def main() -> None:
    global LEDGER
    cfg = config()
    LEDGER = cfg["ledger"]
    r = connect(cfg)
    r.register(hello)
    handle = r.run(cfg["id"], hello, cfg["name"])
    emit(await handle.result())
    await shutdown(r)


asyncio.run(main())
