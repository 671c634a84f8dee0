"""The DBOS side of the peer benchmark: one DBOS Transact app process (runs in its own virtualenv,
``.peers/dbos``, as ``python bench/peers/dbos_app.py SYSTEM_DB_URL POOL MODE IN_FLIGHT``).

``peers_flow(n)`` is an async ``@DBOS.workflow()`` of three async ``@DBOS.step()``s in sequence,
each adding, returning ``n + 6``. The same process starts the workflows and runs them:

* ``direct``: ``DBOS.start_workflow_async`` under ``SetWorkflowID``, then the handle's
  ``get_result()`` (the workflow runs as a task on this event loop; the handle awaits it). The
  driver's lanes (bench/peers/peer_drive.py) keep at most IN_FLIGHT outstanding.
* ``queue``: ``enqueue_async`` on a queue registered with ``worker_concurrency=IN_FLIGHT`` and its
  default polling interval; this process's queue thread dequeues and runs them.

POOL is ``default`` (DBOS's system database pool as configured out of the box) or a number
(``sys_db_pool_size``). No conductor key and no cloud variables are given (the harness strips every
``DBOS*`` variable from the environment), so the process talks to PostgreSQL only.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from dbos import DBOS, DBOSConfig, SetWorkflowID
from peer_drive import serve


@DBOS.step()
async def add(a: int, b: int) -> int:
    return a + b


@DBOS.workflow()
async def peers_flow(n: int) -> int:
    x = await add(n, 1)
    y = await add(x, 2)
    return await add(y, 3)


async def main() -> None:
    url, pool, mode, in_flight = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    config: DBOSConfig = {
        "name": "peers-bench",
        "system_database_url": url,
        "log_level": "WARNING",
        "enable_otlp": False,
    }
    if pool != "default":
        config["sys_db_pool_size"] = int(pool)
    DBOS(config=config)
    DBOS.launch()
    try:
        queue = None
        if mode == "queue":  # registered in the system database, so after launch
            queue = await DBOS.register_queue_async("peers", worker_concurrency=in_flight)

        async def start_direct(i: int, wid: str) -> Any:
            with SetWorkflowID(wid):
                handle = await DBOS.start_workflow_async(peers_flow, i)
            return await handle.get_result()

        async def start_queued(i: int, wid: str) -> Any:
            assert queue is not None
            with SetWorkflowID(wid):
                handle = await queue.enqueue_async(peers_flow, i)
            return await handle.get_result()

        await serve(start_queued if mode == "queue" else start_direct)
    finally:
        DBOS.destroy()


asyncio.run(main())
