"""The embedded default's SQLite backend (``resonate_project.sqlite``): concurrent writers of one
process queue on its lock and all succeed, and a transaction that rolls back, fails or closes its
connection gives the lock back (the next writer does not wait out the busy timeout).

Runs in a child process on a fresh SQLite file, as ``make run`` does, since the test database of
the in-process suite is in memory (shared cache), which locks differently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import json, threading, time
    import django
    django.setup()
    from django.core.management import call_command
    from django.db import connection, connections, transaction
    from promises import services as promises
    from resonate_project.core.clock import now_ms

    call_command("migrate", verbosity=0)
    assert connection.vendor == "sqlite"
    assert type(connections["default"]).__module__ == "resonate_project.sqlite.base"
    errors, slow = [], []

    def client(i):
        try:
            for n in range(40):
                now = now_ms()
                pid = f"c{i}-{n}"
                promises.promise_create(id=pid, timeout_at=now + 60_000, now=now,
                                        tags={"resonate:external": "true"})
                promises.promise_register_listener(awaited=pid, address=f"poll://any@g/{i}",
                                                   now=now)
                promises.promise_settle(id=pid, state="resolved", now=now_ms())
                if n % 10 == 0:
                    try:  # a host transaction that fails after writing: rolled back
                        with transaction.atomic():
                            promises.promise_create(id=f"r{i}-{n}", timeout_at=now + 1, now=now)
                            raise RuntimeError("host failure")
                    except RuntimeError:
                        pass
            connection.close()
        except Exception as exc:
            errors.append(repr(exc))

    started = time.monotonic()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads: t.start()
    for t in threads: t.join(120)
    from promises.models import Promise
    print(json.dumps({
        "errors": errors,
        "alive": sum(t.is_alive() for t in threads),
        "settled": Promise.objects.filter(id__startswith="c", state="resolved").count(),
        "rolled_back": Promise.objects.filter(id__startswith="r").count(),
        "seconds": time.monotonic() - started,
    }))
    """
)


def test_concurrent_writers_on_a_sqlite_file_all_succeed_and_never_wait_out_the_timeout(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'resonate.sqlite3'}",
        "DJANGO_SETTINGS_MODULE": "resonate_project.settings",
        "CELERY_BROKER_URL": "",
    }
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["errors"] == []  # no "database is locked"
    assert result["alive"] == 0
    assert result["settled"] == 8 * 40
    assert result["rolled_back"] == 0
    # A lock leaked by a rolled-back transaction would make every later writer wait out the
    # 30 s busy timeout once: 8 threads x 4 rollbacks could not finish in 30 s.
    assert result["seconds"] < 30, result
