"""The one place the wall clock is read. Everything else receives ``now`` (ms) as an argument."""

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
