"""Scenario 6: a schedule created through the SDK; this process also runs what it fires.

Serves until SIGTERM, then deletes the schedule through the SDK.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from pyshared import config, connect, emit, record, shutdown, until_terminated
from resonate.context import Context

LEDGER = ""


def tick(ctx: Context, label: str) -> str:
    record(LEDGER, f"{ctx.info.id} {label}")
    return f"{label} at {ctx.info.id}"


async def main() -> None:
    global LEDGER
    cfg = config()
    LEDGER = cfg["ledger"]
    r = connect(cfg)
    r.register(tick)
    schedule = await r.schedule(
        cfg["id"], cfg["cron"], "tick", args=(cfg["label"],), promise_timeout=timedelta(minutes=5)
    )
    await until_terminated()
    await schedule.delete()
    emit({"deleted": cfg["id"]})
    await shutdown(r)


asyncio.run(main())
