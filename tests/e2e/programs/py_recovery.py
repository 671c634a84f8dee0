"""Scenario 7: a workflow of fenced ``ctx.run`` steps whose worker is SIGKILLed mid-way.

Each step appends ``<step> <token>`` to the ledger before returning the token, so the test can
count executions and compare every settled value with the execution that produced it. Step
``hold`` waits until the gate file exists, appending a line to the ``holding`` file every 200 ms
meanwhile: the first worker never sees the gate and is killed there.

role "first": starts the workflow (short ttl) and would print its result.
role "second": a worker of the same group; it picks the workflow up after the lease expires.
"""

from __future__ import annotations

import asyncio
import os
import uuid

from pyshared import config, connect, emit, record, shutdown, until_terminated
from resonate.context import Context

CFG: dict[str, str] = {}


async def step(ctx: Context, i: int, hold: int) -> str:
    token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    record(CFG["ledger"], f"{i} {token}")
    while i == hold and not os.path.exists(CFG["gate"]):
        record(CFG["holding"], token)
        await asyncio.sleep(0.2)
    return token


async def pipeline(ctx: Context, steps: int, hold: int) -> list[str]:
    return [await ctx.run(step, i, hold) for i in range(steps)]


async def main() -> None:
    cfg = config()
    CFG.update(ledger=cfg["ledger"], gate=cfg["gate"], holding=cfg["holding"])
    r = connect(cfg)
    r.register(pipeline)
    if cfg["role"] == "first":
        handle = r.run(cfg["id"], pipeline, cfg["steps"], cfg["hold"])
        emit(await handle.result())
    else:
        await until_terminated()
    await shutdown(r)


asyncio.run(main())
