"""The production shape on several test hosts (``make chaos-hosts``' short round, issue 29).

Each part runs on a host of its own, a network namespace the run creates: two web hosts, a worker
host (Celery worker and beat), two SDK hosts, a database host, a Redis host, the load on a client
host. Under the SDK load web1 is cut off from every other host for 10 s (its link down), then the
worker host's clock is stepped +2 s and -2 s. Afterwards the checker's guarantees hold as in
``make chaos`` (tests/system/test_chaos_short.py): every workflow completed with its result,
no acknowledged write lost, no task with two holders, every unblock heard, the outbox empty, no
500s; and full service came back after each fault. When the run ends, also when it fails or is
killed, none of its hosts and none of its processes is left.

The run is a child process: it moves itself into the client host's namespace, which a test
process must not do to itself."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = str(ROOT / "bench")
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

from chaos.cluster import Missing, sdk_python  # noqa: E402
from chaos.hosts import IP, PREFIX, namespaces, require, serve_argv, sweep  # noqa: E402

from tests.support.docs_blocks import block  # noqa: E402

from .conftest import unavailable  # noqa: E402

pytestmark = pytest.mark.integration

PRODUCTION = "docs/how-to/production.md"
LIMIT_S = 240  # the round takes ~1.5 min on 2 quiet cores


def _unavailable(reason: str) -> None:
    unavailable("hosts", reason)


@pytest.fixture(scope="module")
def tools() -> None:
    if shutil.which("redis-server") is None:
        _unavailable("redis-server is not on PATH")
    try:
        require()
        sdk_python()
    except Missing as exc:
        _unavailable(str(exc))
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = subprocess.run([IP, "netns", "add", probe], capture_output=True, text=True, check=False)
    subprocess.run([IP, "netns", "del", probe], capture_output=True, check=False)
    if made.returncode != 0:
        _unavailable(f"cannot create a network namespace: {made.stderr.strip()}")


def _left_behind(workdir: str) -> list[str]:
    """Processes whose command line or environment names the run's work directory."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            text = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
            if workdir.encode() in text:
                found.append(f"{proc.name}: {(proc / 'cmdline').read_bytes()[:120]!r}")
    return found


@pytest.mark.usefixtures("tools")
def test_a_web_host_cut_off_and_a_clock_step_lose_nothing(tmp_path: Path) -> None:
    result_file = tmp_path / "result.json"
    out = tmp_path / "run.log"
    argv = [sys.executable, "-m", "bench.chaos.hosts_run", "--short", "--json", str(result_file)]
    began = time.monotonic()
    with out.open("wb") as log:
        run = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            run.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            run.send_signal(signal.SIGTERM)  # the run removes its hosts as it unwinds
            try:
                run.wait(timeout=60)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
        finally:
            sweep(owner=run.pid)  # a killed run's hosts (and what still runs in them)
    took = time.monotonic() - began
    text = out.read_text(errors="replace")
    workdir = re.search(r"workdir (\S+)", text)
    ours = [n for n in namespaces() if n.startswith(f"{PREFIX}{run.pid}-")]
    assert ours == [], f"hosts left behind: {ours}"
    if workdir is not None:
        left = _left_behind(workdir.group(1))
        shutil.rmtree(
            workdir.group(1), ignore_errors=True
        )  # a killed run's (a finished one's is gone)
        assert left == [], f"processes left behind: {left}"
    assert run.returncode == 0, f"the run exited {run.returncode}:\n{text[-6000:]}"
    result = json.loads(result_file.read_text())
    assert result["ok"], "\n".join(result["problems"])
    [row] = result["scenarios"]
    assert row["faults"] == ["web-cut", "clock-step"]
    assert row["unrecovered_faults"] == 0
    assert row["lost_acknowledged_writes"] == 0
    assert row["acknowledged_writes"] > 0
    done, started = (int(x) for x in row["workflows"].split("/"))
    assert done == started > 0
    assert row["listeners"] > 0
    assert row["never_unblocked"] == 0
    assert took < LIMIT_S, f"the hosts run took {took:.0f}s"


def test_make_chaos_hosts_pg_runs_postgresql_alone_as_the_production_guide_says() -> None:
    """The guide's PostgreSQL-alone block sets no broker and starts ``serve`` on each host with
    no more than its address: the processes ``make chaos-hosts-pg`` starts on its web hosts."""
    lines = [shlex.split(line) for line in block(PRODUCTION, "production-postgresql-alone").lines()]
    exported = {w.partition("=")[0] for words in lines if words[0] == "export" for w in words[1:]}
    assert "DATABASE_URL" in exported
    assert not {"CELERY_BROKER_URL", "RESONATE_NOTIFY_URL"} & exported
    assert not any("celery" in words for words in lines)
    [serve] = [words for words in lines if words[:3] == ["python", "manage.py", "serve"]]
    assert _without_address(serve[1:]) == _without_address(serve_argv("web1", pg_only=True)[1:])
    assert "--no-embedded" in serve_argv("web1", pg_only=False)


def _without_address(argv: list[str]) -> list[str]:
    out, skip = [], False
    for word in argv:
        if not skip and word not in {"--host", "--port"}:
            out.append(word)
        skip = word in {"--host", "--port"}
    return out
