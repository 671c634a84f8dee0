"""The one place the wall clock is read. Everything else receives ``now`` (ms) as an argument.

A test-only hook (``make chaos-hosts``' clock-step fault, bench/chaos/hosts.py): with
``RESONATE_TEST_CLOCK_OFFSET_FILE`` naming a file, :func:`now_ms` adds the integer number of
milliseconds written in it (re-read at most every 200 ms, so a test can step a running process's
clock forward or back). Linux time namespaces offset only CLOCK_MONOTONIC and CLOCK_BOOTTIME, never
the wall clock, so a host's clock step is simulated here. The hook is refused (the process does not
start) unless ``RESONATE_DEBUG`` or ``RESONATE_TEST_HOOKS`` is on; without the variable
:func:`now_ms` is the plain read below and costs nothing more.
"""

import os
import time

_OFFSET_FILE = os.environ.get("RESONATE_TEST_CLOCK_OFFSET_FILE", "")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


if _OFFSET_FILE:
    if not (_on("RESONATE_DEBUG") or _on("RESONATE_TEST_HOOKS")):
        raise RuntimeError(
            "RESONATE_TEST_CLOCK_OFFSET_FILE is a test hook: it is refused unless RESONATE_DEBUG "
            "or RESONATE_TEST_HOOKS is on"
        )
    _offset = [0, 0.0]  # milliseconds, monotonic time of the last read

    def _skewed_now_ms() -> int:
        at = time.monotonic()
        if at - _offset[1] > 0.2:
            _offset[1] = at
            try:
                with open(_OFFSET_FILE) as f:
                    _offset[0] = int(f.read().strip() or 0)
            except (OSError, ValueError):
                pass  # keep the last offset (a half-written file, a missing one)
        return time.time_ns() // 1_000_000 + int(_offset[0])

    now_ms = _skewed_now_ms
