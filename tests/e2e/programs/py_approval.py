"""Scenario 5: two detached children, then a promise settled from outside (``ctx.promise``)."""

from __future__ import annotations

import asyncio
from typing import Any

from pyshared import config, connect, emit, record, shutdown
from resonate.context import Context

LEDGER = ""


def audit(ctx: Context, order: str, desk: str) -> str:
    record(LEDGER, f"{desk} {order}")
    return f"{desk} audited {order}"


def ship(ctx: Context, order: str, decision: dict[str, Any]) -> str:
    return f"{order} shipped, approved by {decision['by']}"


async def approval(ctx: Context, order: str) -> dict[str, Any]:
    audits = [await ctx.detached("audit", order, desk) for desk in ("finance", "legal")]
    decision = await ctx.promise()
    if not decision["approved"]:
        return {"audits": audits, "outcome": "refused"}
    outcome = await ctx.run(ship, order, decision)
    return {"audits": audits, "outcome": outcome}


async def main() -> None:
    global LEDGER
    cfg = config()
    LEDGER = cfg["ledger"]
    r = connect(cfg)
    r.register(audit)
    r.register(approval)
    handle = r.run(cfg["id"], approval, cfg["order"])
    result = await handle.result()
    # Detached children are not awaited by the workflow; wait for them here so they finish.
    result["audit_results"] = [await (await r.get(a)).result() for a in result["audits"]]
    emit(result)
    await shutdown(r)


asyncio.run(main())
