"""The Resonate side of the peer benchmark: ``resonate-sdk`` against our server (runs in the SDK's
virtualenv, ``.e2e/py``, as ``python bench/peers/sdk_app.py MODE URL``).

``peers_flow(n)`` is three durable steps in sequence (``ctx.run`` of a plain function that adds),
returning ``n + 6``. Modes:

* ``one``: one process registers the workflow and starts each one with ``resonate.run``: the task
  is created and acquired by this process and runs here (the shape of DBOS's single app process).
* ``worker``: registers the workflow in group ``peers-worker`` and runs what the server sends it,
  until stdin closes or SIGTERM.
* ``client``: group ``peers-client``, registers nothing; starts each workflow with
  ``resonate.options(target="peers-worker").rpc(...)`` and awaits its result (an ``unblock`` on
  its own stream).

``one`` and ``client`` read commands on stdin (bench/peers/peer_drive.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any

from peer_drive import serve
from resonate.context import Context
from resonate.resonate import Resonate

WORKER_GROUP = "peers-worker"


def add(ctx: Context, a: int, b: int) -> int:
    return a + b


async def peers_flow(ctx: Context, n: int) -> int:
    x = await ctx.run(add, n, 1)
    y = await ctx.run(add, x, 2)
    return await ctx.run(add, y, 3)


async def until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    async def stdin_closed() -> None:
        while await asyncio.to_thread(sys.stdin.readline):
            pass
        stop.set()

    watcher = asyncio.create_task(stdin_closed())
    await stop.wait()
    watcher.cancel()


async def main() -> None:
    mode, url = sys.argv[1], sys.argv[2]
    group = {"one": "peers-one", "worker": WORKER_GROUP, "client": "peers-client"}[mode]
    r = Resonate(url=url, group=group)
    if mode in ("one", "worker"):
        r.register(add)
        r.register(peers_flow)
    try:
        if mode == "worker":
            print("READY", flush=True)
            await until_stopped()
        elif mode == "one":

            async def start_local(i: int, wid: str) -> Any:
                return await r.run(wid, peers_flow, i).result()

            await serve(start_local)
        else:
            remote = r.options(target=WORKER_GROUP)

            async def start_remote(i: int, wid: str) -> Any:
                return await remote.rpc(wid, "peers_flow", i).result()

            await serve(start_remote)
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(r.stop(), timeout=10)


asyncio.run(main())
