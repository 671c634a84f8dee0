"""CPU per ``manage.py resonate`` call (issue #25: under 0.5 s with ``--server``, 1.5 s locally).

Each call is a fresh process, as an operator's shell runs it; its user + system CPU seconds come
from ``getrusage(RUSAGE_CHILDREN)`` around the call. Cases: ``promises search`` and ``promises
get`` on the local database (a fresh SQLite file) and with ``--server`` against a ``manage.py
serve`` started on 127.0.0.1 for the run. Each case runs ``--runs`` times (after one warm-up
call); printed: the median with min and max, and the 1-minute load average before the case.

Two environments, each measured in the same run: ``compiled`` (as installed: ``make setup``
writes the bytecode) and ``no bytecode`` (an empty ``PYTHONPYCACHEPREFIX`` and
``PYTHONDONTWRITEBYTECODE=1``: every module compiled again at each start, as every start was
before), and their ratio. ``--save FILE`` writes the figures as JSON; ``--baseline FILE``
prints each case's ratio to that earlier run (an older commit's figures, say).

    .venv/bin/python bench/cli_cpu.py [--runs 7] [--save before.json] [--baseline before.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMISE = "bench-cli-promise"


def cpu_seconds(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr.decode()}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit("manage.py serve exited before answering /health")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("manage.py serve did not answer /health within 60 s")


def measure(cases: dict[str, list[str]], env: dict[str, str], runs: int) -> dict[str, dict]:
    results = {}
    for name, args in cases.items():
        argv = [sys.executable, "manage.py", "resonate", *args]
        cpu_seconds(argv, env)  # warm-up: the page cache, and the bytecode where it is written
        load = os.getloadavg()[0]
        samples = [cpu_seconds(argv, env) for _ in range(runs)]
        results[name] = {
            "median": statistics.median(samples),
            "min": min(samples),
            "max": max(samples),
            "load1": load,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--save", type=Path, help="write the figures as JSON")
    parser.add_argument("--baseline", type=Path, help="an earlier --save to compare with")
    opts = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="resonate-cli-cpu-") as tmp:
        env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp}/cli.sqlite3"}
        env.pop("CELERY_BROKER_URL", None)
        nobytecode = {
            **env,
            "PYTHONPYCACHEPREFIX": f"{tmp}/pycache",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "-v0"], env=env, cwd=ROOT, check=True
        )
        create = ["promises", "create", PROMISE, "--timeout", "1h", "--data", "hello"]
        subprocess.run(
            [sys.executable, "manage.py", "resonate", *create],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_healthy(url, server)
            cases = {
                "local: promises search": ["promises", "search"],
                "local: promises get": ["promises", "get", PROMISE],
                "--server: promises search": ["promises", "search", "--server", url],
                "--server: promises get": ["promises", "get", PROMISE, "--server", url],
            }
            figures = {
                "compiled": measure(cases, env, opts.runs),
                "no bytecode": measure(cases, nobytecode, opts.runs),
            }
        finally:
            server.terminate()
            server.wait(timeout=30)

    baseline = json.loads(opts.baseline.read_text()) if opts.baseline else None
    head = f"{'case':28} {'env':12} {'median':>7} {'min':>6} {'max':>6} {'load1':>6}"
    print(f"CPU seconds per call, {opts.runs} runs each (user + system)")
    print(head + ("  no-bytecode/compiled" if baseline is None else "  baseline/now"))
    for env_name, cases_figures in figures.items():
        for case, f in cases_figures.items():
            if baseline is None:
                ratio = figures["no bytecode"][case]["median"] / f["median"]
                note = f"  {ratio:.1f}x" if env_name == "compiled" else ""
            else:
                then = baseline.get(env_name, {}).get(case)
                note = f"  {then['median'] / f['median']:.1f}x" if then else "  -"
            print(
                f"{case:28} {env_name:12} {f['median']:7.2f} {f['min']:6.2f} {f['max']:6.2f}"
                f" {f['load1']:6.2f}{note}"
            )
    if opts.save:
        opts.save.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
