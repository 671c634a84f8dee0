"""Plumbing shared by the Python SDK programs (they run in .e2e/py, not the project's venv).

Every program takes one JSON argument, prints ``RESULT <json>`` when it has an answer, and, when
it serves as a worker, keeps serving until SIGTERM, then stops the SDK cleanly.
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

from resonate.resonate import Resonate


def config() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(sys.argv[1])
    return loaded


def connect(cfg: dict[str, Any]) -> Resonate:
    ttl = cfg.get("ttl_ms")
    return Resonate(
        url=os.environ["RESONATE_URL"],
        group=cfg["group"],
        pid=cfg.get("pid"),
        ttl=timedelta(milliseconds=ttl) if ttl else None,
    )


def emit(value: Any) -> None:
    print("RESULT " + json.dumps(value), flush=True)


def record(path: str, line: str) -> None:
    """Append one line durably: the test reads these files after a SIGKILL."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


async def until_terminated() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("READY", flush=True)
    await stop.wait()


async def shutdown(r: Resonate) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(r.stop(), timeout=10)
