"""Module-level Django tasks the tests enqueue (a worker subprocess imports them by path).

Each records what it did in a ledger file when given one, appended and fsynced per line, so a
test can count runs after a worker is SIGKILLed.
"""

from __future__ import annotations

import os
import time

from django.tasks import TaskContext, task


def note(ledger: str, line: str) -> None:
    with open(ledger, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def noop() -> None:
    return None


@task
def explode(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def flaky(context: TaskContext, succeed_on: int, ledger: str = "") -> int:
    """Fails until attempt ``succeed_on``; returns the attempt that succeeded."""
    attempt = context.attempt
    if ledger:
        note(ledger, f"{context.task_result.id} attempt {attempt}")
    if attempt < succeed_on:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt


@task(takes_context=True)
def slow(context: TaskContext, ledger: str, seconds: float) -> str:
    """Notes its start and end (with the attempt and the worker) around a sleep."""
    result = context.task_result
    who = f"{result.id} {context.attempt} {result.worker_ids[-1]}"
    note(ledger, f"start {who}")
    time.sleep(seconds)
    note(ledger, f"end {who}")
    return result.worker_ids[-1]


@task
def unserialisable() -> object:
    return object()


@task(priority=10)
def urgent(ledger: str) -> None:
    note(ledger, "urgent")


@task
def routine(ledger: str) -> None:
    note(ledger, "routine")


@task(queue_name="other")
def elsewhere() -> str:
    return "other queue"


@task(queue_name="emails")
def receipt(order: int) -> str:
    return f"receipt for order {order}"


@task
async def coroutine(x: int) -> int:
    return x * 2
