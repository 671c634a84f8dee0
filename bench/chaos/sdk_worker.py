"""An SDK worker of the chaos run (runs in the ``.e2e/py`` virtualenv with ``resonate-sdk``).

Group ``chaos-a`` runs ``chaos_flow``: a durable step, a 1 s durable sleep, an rpc to ``square``
(registered only by group ``chaos-b``), a promise settled from outside (the driver's
human-in-the-loop settlement through ``POST /``), and a last durable step. Its result is known in
advance: ``(n + 1) ** 2 + bonus``, where the driver settles the human promise with ``bonus``.

One JSON argument: ``{"group", "pid", "ttl_ms"}``. Prints READY, serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from datetime import timedelta
from typing import Any

from resonate.context import Context
from resonate.resonate import Resonate


def add(ctx: Context, a: int, b: int) -> int:
    return a + b


def square(ctx: Context, x: int) -> int:
    return x * x


async def chaos_flow(ctx: Context, n: int) -> dict[str, Any]:
    x = await ctx.run(add, n, 1)
    await ctx.sleep(timedelta(seconds=1))
    y = await ctx.options(target="chaos-b").rpc("square", x)
    decision = await ctx.promise()
    z = await ctx.run(add, y, decision["bonus"])
    return {"n": n, "value": z}


async def main() -> None:
    cfg: dict[str, Any] = json.loads(sys.argv[1])
    r = Resonate(
        url=os.environ["RESONATE_URL"],
        group=cfg["group"],
        pid=cfg["pid"],
        ttl=timedelta(milliseconds=cfg["ttl_ms"]),
    )
    if cfg["group"] == "chaos-a":
        r.register(add)
        r.register(chaos_flow)
    else:
        r.register(square)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("READY", flush=True)
    await stop.wait()
    with contextlib.suppress(Exception):
        await asyncio.wait_for(r.stop(), timeout=10)


asyncio.run(main())
