"""A worker of a group that registers none of the functions sent to it (issue 25): every
``execute`` it gets names a function it lacks, so the SDK releases the task. Serves until
SIGTERM."""

from __future__ import annotations

import asyncio

from pyshared import config, connect, shutdown, until_terminated


async def main() -> None:
    r = connect(config())
    await until_terminated()
    await shutdown(r)


asyncio.run(main())
