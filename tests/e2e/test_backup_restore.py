"""The backup and restore drill (docs/how-to/production.md): ``pg_dump`` of a production database
mid-run, restored into a new database on a new stack after the first is killed, and every piece of
work in flight finishes there with its expected result.

In flight at the dump: a workflow holding an acquired task (its worker is killed with the first
stack), a workflow suspended on a durable sleep (a pending timer), a schedule firing every two
seconds, and an ``unblock`` owed to a listener stream that is not connected (an undelivered
message). On the restored stack: the lease expires and the task is offered again, the timer fires,
the schedule carries on from where the dump left it without firing an occurrence twice, and the
listener gets its message when it connects.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.system.harness import (
    FAR,
    PG_DIRECT_URL,
    PG_URL,
    Outbox,
    Stack,
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate,
    streams,
    unblock,
)

from . import tools
from .conftest import _redis_url, _server_env
from .sdk import (
    Programs,
    assert_all_resolved,
    decode,
    executions,
    lineage,
    lines,
    poll,
    promise,
    tasks_of,
    unique,
    wait_settled,
)

TTL_MS = 2000  # the held workflow's lease: it expires on the restored stack soon after start
CRON = "*/2 * * * * *"  # every two seconds (six fields: seconds first)


def pg_tool(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        if "No such file" in done.stderr or done.returncode == 127:
            if os.environ.get("CI") == "true":
                pytest.fail(f"CI=true and {argv[0]} is missing")
            pytest.skip(f"{argv[0]} unavailable")
        raise AssertionError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")


@contextlib.contextmanager
def production(name: str, logdir: Path, *, fresh: bool) -> Iterator[Stack]:
    """The production shape (web ``--no-embedded``, a Celery worker, beat) on database ``name``."""
    env = _server_env(PG_URL.format(name=name), _redis_url())
    if fresh:
        migrate(env)
    stack = Stack("production", f"http://127.0.0.1:{free_port()}", env, logdir, Outbox(name))
    try:
        stack.start_web("--no-embedded")
        stack.start_worker()
        stack.start_beat()
        yield stack
    finally:
        stack.stop()


def occurrences(server: Stack, schedule_id: str) -> dict[str, dict[str, Any]]:
    found = server.ok("promise.search", tags={"resonate:schedule": schedule_id}, limit=1000)
    return {p["id"]: p for p in found["promises"]}


def test_a_database_restored_from_a_dump_taken_mid_run_finishes_every_workflow(
    py_sdk: tools.PythonSdk, tmp_path: Path
) -> None:
    first_db, second_db = create_pg_database(), create_pg_database()
    dump = tmp_path / "resonate.dump"
    logs_a, logs_b = tmp_path / "a", tmp_path / "b"
    logs_a.mkdir()
    logs_b.mkdir()
    held_root, sleeper, schedule_id = unique("drill-held"), unique("drill-sleep"), unique("drill-s")
    # One group per program: a worker offered a function it lacks releases it.
    held_group, sleep_group, tick_group = unique("gh"), unique("gs"), unique("gt")
    listener_group = unique("lg")
    ledger, gate, holding = tmp_path / "ledger", tmp_path / "gate", tmp_path / "holding"
    ticks_a, ticks_b = tmp_path / "ticks-a", tmp_path / "ticks-b"
    held: dict[str, Any] = {"group": held_group, "ttl_ms": TTL_MS, "gate": str(gate)}
    held.update(ledger=str(ledger), holding=str(holding))
    steps, hold = 4, 2
    owed = unique("drill-owed")
    address = f"poll://uni@{listener_group}/late"
    try:
        with production(first_db, logs_a, fresh=True) as a:
            on_a = Programs(a, logs_a, py_sdk=py_sdk)
            try:
                # An unblock owed to a stream that is not connected.
                a.ok("promise.create", id=owed, timeoutAt=FAR, tags={"resonate:external": "true"})
                a.ok("promise.register_listener", awaited=owed, address=address)
                owed_record = a.ok("promise.settle", id=owed, state="resolved", value={})["promise"]
                # A workflow holding its task, one sleeping on a durable timer, a schedule.
                on_a.python(
                    "py_recovery.py", role="first", id=held_root, steps=steps, hold=hold, **held
                )
                on_a.python(
                    "py_countdown.py", id=sleeper, group=sleep_group, start=2, pause_ms=15_000
                )
                on_a.python(
                    "py_schedule.py",
                    id=schedule_id,
                    group=tick_group,
                    cron=CRON,
                    label="drill",
                    ledger=str(ticks_a),
                )
                poll(lambda: len(lines(holding)) >= 5, f"step {hold} to hold on", on_a.tails)
                poll(
                    lambda: (
                        promise(a, f"{sleeper}:1")["state"] == "resolved"
                        and len(lineage(a, sleeper)) >= 3
                    ),
                    "the countdown to sleep",
                    on_a.tails,
                )
                poll(
                    lambda: (
                        sum(p["state"] == "resolved" for p in occurrences(a, schedule_id).values())
                        >= 2
                    ),
                    "two occurrences of the schedule",
                    on_a.tails,
                )
                assert tasks_of(a, {held_root})[held_root]["state"] == "acquired"
                assert tasks_of(a, {sleeper})[sleeper]["state"] in ("suspended", "acquired")
                assert [row["address"] for row in a.outbox.rows()].count(address) == 1

                pg_tool(
                    "pg_dump", "-Fc", "-d", PG_DIRECT_URL.format(name=first_db), "-f", str(dump)
                )
            finally:
                for proc in on_a.procs:  # the machine is lost: nothing stops cleanly
                    proc.kill_hard()
                for proc in a.procs.values():
                    proc.kill_hard()

        # Directly (pg_restore sets search_path for its session, which a transaction pooler
        # does not keep: docs/how-to/production.md#pgbouncer).
        pg_tool("pg_restore", "--no-owner", "-d", PG_DIRECT_URL.format(name=second_db), str(dump))
        gate.touch()
        with production(second_db, logs_b, fresh=False) as b:
            at_restore = occurrences(b, schedule_id)
            on_b = Programs(b, logs_b, py_sdk=py_sdk)
            try:
                with streams(b, (listener_group, "late")) as [late]:
                    late.wait_for(
                        lambda f: f.get("kind") == "unblock" and f["data"]["promise"]["id"] == owed,
                        f"unblock {owed}",
                    )
                    assert unblock(owed_record)["data"]["promise"]["id"] == owed

                on_b.python("py_recovery.py", role="second", pid=unique("second"), **held)
                countdown = on_b.python(
                    "py_countdown.py", id=sleeper, group=sleep_group, start=2, pause_ms=15_000
                )
                on_b.python(
                    "py_schedule.py",
                    id=schedule_id,
                    group=tick_group,
                    cron=CRON,
                    label="drill",
                    ledger=str(ticks_b),
                )
                assert on_b.result(countdown) == ["T-2", "T-1", "liftoff"]
                assert wait_settled(b, held_root, on_b)["state"] == "resolved"
                poll(
                    lambda: (
                        sum(
                            p["state"] == "resolved"
                            for pid, p in occurrences(b, schedule_id).items()
                            if pid not in at_restore
                        )
                        >= 2
                    ),
                    "two occurrences after the restore",
                    on_b.tails,
                )
            finally:
                on_b.close()

            # The held workflow: steps settled before the dump never ran again.
            runs: dict[int, int] = {}
            for step, _ in executions(ledger):
                runs[step] = runs.get(step, 0) + 1
            assert runs == {i: 2 if i == hold else 1 for i in range(steps)}
            held_records = lineage(b, held_root)
            assert_all_resolved(held_records)
            assert len(decode(held_records[held_root])) == steps
            # The sleeper: its first step ran on the first stack only, once.
            sleep_records = lineage(b, sleeper)
            assert_all_resolved(sleep_records)
            assert decode(sleep_records[f"{sleeper}:1"]) == "T-2"
            # The schedule: every occurrence the restored stack ran is a new one, run once.
            ran_b = [line.split()[0] for line in lines(ticks_b)]
            assert ran_b, "the restored stack ran no occurrence"
            assert len(ran_b) == len(set(ran_b)), ran_b
            assert not set(ran_b) & {
                pid for pid, p in at_restore.items() if p["state"] != "pending"
            }
            assert all(
                p["state"] in ("resolved", "pending") for p in occurrences(b, schedule_id).values()
            )
    finally:
        drop_pg_database(first_db)
        drop_pg_database(second_db)
