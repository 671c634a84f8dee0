"""The production shape on several test hosts: Linux network namespaces the run creates itself.

Each host is a network namespace (``rhosts-<pid>-<host>``, ``<pid>`` the harness's process id) with
one interface, ``eth0``, addressed in 10.231.0.0/24 and plugged into a bridge in a switch namespace
of its own (``rhosts-<pid>-sw``). Nothing is added to the machine's own namespace: the harness
moves itself into the client host's namespace (:meth:`Network.enter`) and starts every other
process through ``ip netns exec``. A link down is the switch port's (``p-<host>``) going down: that
host is cut off from every other one until it comes back up.

Hosts: ``client`` (the load driver and its push receiver), ``web1`` and ``web2`` (``serve
--no-embedded``), ``worker`` (a Celery worker and beat), ``sdk1`` and ``sdk2`` (SDK workers of both
groups, connected to web1 and web2), ``db`` (a private PostgreSQL cluster) and ``redis``. In the
PostgreSQL-alone shape (``pg_only``) there is no Redis and no Celery: each web host runs ``serve``
with the steps and push in its own process, on PostgreSQL.

A host's clock: Linux time namespaces (``unshare --time``) offset CLOCK_MONOTONIC and
CLOCK_BOOTTIME only, never CLOCK_REALTIME, so a host's wall-clock step is simulated through the
server's test-only hook (resonate_project/core/clock.py): every server process of a host reads its
offset from that host's file (:meth:`HostsCluster.step_clock`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from .cluster import (
    AUDIT_SQL,
    CELERY,
    PG_BIN,
    PYTHON,
    ROOT,
    SDK_PROGRAM,
    SDK_TTL_MS,
    Cluster,
    Missing,
    Postgres,
    Proc,
    Redis,
    Shape,
    log,
    sdk_environment,
    server_env,
    wait_for,
)

IP = os.environ.get("CHAOS_IP", "/usr/sbin/ip")
PREFIX = "rhosts-"
SUBNET = "10.231.0"
ADDRESSES = {
    "client": 10,
    "web1": 11,
    "web2": 12,
    "worker": 13,
    "sdk1": 14,
    "sdk2": 15,
    "db": 20,
    "redis": 21,
}
WEB_PORT = 8000
PG_PORT = 5432
REDIS_PORT = 6379


def address(host: str) -> str:
    return f"{SUBNET}.{ADDRESSES[host]}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {done.stderr.strip()}")
    return done


def require() -> None:
    """Raise :class:`Missing` when the run cannot create its hosts here."""
    if not Path(IP).exists():
        raise Missing(f"{IP} not found (iproute2; set CHAOS_IP)")
    if os.geteuid() != 0:
        raise Missing("network namespaces need root")
    if not hasattr(os, "setns"):
        raise Missing("os.setns needs Python >= 3.12 on Linux")
    for tool in ("initdb", "pg_ctl"):
        if not (PG_BIN / tool).exists():
            raise Missing(f"{PG_BIN / tool} not found (set CHAOS_PG_BIN)")


def namespaces() -> list[str]:
    done = _ip("netns", "list", check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _owner(name: str) -> int | None:
    try:
        return int(name[len(PREFIX) :].split("-", 1)[0])
    except ValueError:
        return None


def remove(name: str) -> None:
    """Kill what still runs in one of our namespaces (by process id), then delete it."""
    done = _ip("netns", "pids", name, check=False)
    me = os.getpid()  # the harness lives in the client host's namespace: it never kills itself
    pids = [int(p) for p in done.stdout.split() if p.isdigit() and int(p) != me]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if Path(f"/proc/{p}").exists()]
        time.sleep(0.05)
    _ip("netns", "del", name, check=False)


def sweep(owner: int | None = None) -> list[str]:
    """Delete the namespaces of ``owner``'s run, or (None) of every run whose harness is gone."""
    removed = []
    for name in namespaces():
        if not name.startswith(PREFIX):
            continue
        pid = _owner(name)
        if owner is not None and pid != owner:
            continue
        if owner is None and pid is not None and Path(f"/proc/{pid}").exists():
            continue  # a run that is still going
        remove(name)
        removed.append(name)
    return removed


class Network:
    """The switch and the hosts of one run; :meth:`destroy` removes them all."""

    def __init__(self, hosts: list[str], owner: int | None = None) -> None:
        self.tag = f"{PREFIX}{owner if owner is not None else os.getpid()}"
        self.hosts = hosts
        self.created: list[str] = []
        self.cut_off: set[str] = set()

    def ns(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def exec(self, host: str) -> list[str]:
        return [IP, "netns", "exec", self.ns(host)]

    def create(self) -> None:
        stale = sweep()
        if stale:
            log(f"removed {len(stale)} namespaces of an earlier run: {', '.join(stale)}")
        switch = self.ns("sw")
        _ip("netns", "add", switch)
        self.created.append(switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        for host in self.hosts:
            ns = self.ns(host)
            _ip("netns", "add", ns)
            self.created.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            port = f"p-{host}"
            _ip(
                "-n",
                switch,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                ns,
            )
            _ip("-n", switch, "link", "set", port, "master", "br0")
            _ip("-n", switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", f"{address(host)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
        log(f"hosts {', '.join(f'{h} {address(h)}' for h in self.hosts)} ({self.tag}-*)")

    def enter(self, host: str) -> None:
        """Move this process (its calling thread, and every thread and child it starts later) into
        ``host``'s namespace. Call it before any thread starts."""
        fd = os.open(f"/run/netns/{self.ns(host)}", os.O_RDONLY)
        try:
            os.setns(fd, os.CLONE_NEWNET)
        finally:
            os.close(fd)

    def cut(self, host: str) -> None:
        _ip("-n", self.ns("sw"), "link", "set", f"p-{host}", "down")
        self.cut_off.add(host)

    def restore(self, host: str) -> None:
        _ip("-n", self.ns("sw"), "link", "set", f"p-{host}", "up")
        self.cut_off.discard(host)

    def destroy(self) -> None:
        for ns in reversed(self.created):
            remove(ns)
        self.created.clear()


# --- the services on their hosts ---------------------------------------------------------------


class HostPostgres(Postgres):
    """The private cluster, run inside the database host and listening on its address."""

    def __init__(self, workdir: Path, net: Network) -> None:
        super().__init__(workdir)
        self.net = net
        self.port = PG_PORT
        self.host = address("db")
        # initdb's pg_hba.conf trusts loopback only: the other hosts connect over the switch.
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {SUBNET}.0/24 trust\n")

    def within(self) -> list[str]:
        return self.net.exec("db")


class HostRedis(Redis):
    def __init__(self, workdir: Path, net: Network) -> None:
        super().__init__(workdir)
        self.host = address("redis")
        self.port = REDIS_PORT
        binary = self.proc.argv[0]
        argv = [binary, "--port", str(self.port), "--bind", self.host, "--protected-mode", "no"]
        argv += ["--save", "", "--appendonly", "no", "--dir", str(workdir)]
        self.proc.argv = [*net.exec("redis"), *argv]

    def url(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    def start(self) -> None:
        self.proc.start()

        def up() -> bool:
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.host, self.port), timeout=1) as s,
            ):
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
            return False

        wait_for(up, "redis-server", 30)


@dataclass
class HostShape(Shape):
    hosts: dict[str, str] = field(default_factory=dict)  # process name -> host

    def urls(self) -> list[str]:
        return [f"http://{address(f'web{i + 1}')}:{WEB_PORT}" for i in range(len(self.webs))]


def serve_argv(host: str, pg_only: bool) -> list[str]:
    """A web host's ``serve``: with a broker, requests and streams only; PostgreSQL alone (no
    broker in its environment), also the steps and push, as docs/how-to/production.md says."""
    argv = [PYTHON, "manage.py", "serve", "--host", address(host), "--port", str(WEB_PORT)]
    return argv if pg_only else [*argv, "--no-embedded"]


class HostsCluster(Cluster):
    """:class:`bench.chaos.cluster.Cluster` with each part on its own host (network namespace).

    Call :meth:`Network.enter` for the ``client`` host before :meth:`start`: the harness (migrate,
    the load, the checker) then reaches every host over the switch.
    """

    def __init__(self, sdk_python: Path, net: Network, pg_only: bool = False) -> None:
        super().__init__(sdk_python, sdk_workers_per_group=2)
        self.net = net
        self.pg_only = pg_only
        self.clock_files = {h: self.workdir / f"clock-{h}" for h in ("web1", "web2", "worker")}
        for path in self.clock_files.values():
            path.write_text("0")

    def host_env(self, env: dict[str, str], host: str) -> dict[str, str]:
        env = dict(env)
        if host in self.clock_files:
            # resonate_project/core/clock.py's test-only hook (refused without RESONATE_TEST_HOOKS)
            env["RESONATE_TEST_HOOKS"] = "1"
            env["RESONATE_TEST_CLOCK_OFFSET_FILE"] = str(self.clock_files[host])
        return env

    def step_clock(self, host: str, offset_ms: int) -> None:
        """Step every server process of ``host`` to the wall clock plus ``offset_ms``."""
        path = self.clock_files[host]
        temporary = path.with_suffix(".new")
        temporary.write_text(str(offset_ms))
        temporary.replace(path)

    def start(self) -> Shape:
        log(f"workdir {self.workdir}")
        self.pg = HostPostgres(self.workdir, self.net)
        self.pg.start()
        if not self.pg_only:
            self.redis = HostRedis(self.workdir, self.net)
            self.redis.start()
        with psycopg.connect(self.pg.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.db}"')
        broker = self.redis.url() if self.redis is not None else ""
        env = server_env(self.pg.url(self.db), broker)
        if not broker:
            env.pop("CELERY_BROKER_URL", None)
        env["RESONATE_PUSH_ALLOWED"] = f"{SUBNET}.0/24"
        # The clients name each web host by its address (docs/how-to/production.md#deployment).
        env["DJANGO_ALLOWED_HOSTS"] = ",".join(address(h) for h in ("web1", "web2"))
        for argv in (["migrate", "--noinput"], ["resonate", "credentials", "create", "chaos"]):
            done = subprocess.run(
                [PYTHON, "manage.py", *argv],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
            if argv[0] == "migrate":
                with psycopg.connect(self.pg.url(self.db), autocommit=True) as conn:
                    conn.execute(AUDIT_SQL)
        token = done.stdout.splitlines()[-1].strip()
        assert self.pg is not None
        shape = HostShape(self.workdir, self.pg, self.redis, self.sdk_python, env=env, token=token)  # type: ignore[arg-type]
        self.shape = shape
        shape.ports = [WEB_PORT, WEB_PORT]
        for i in (1, 2):
            host = f"web{i}"
            argv = serve_argv(host, self.pg_only)
            web_env = self.host_env(env, host)
            shape.webs.append(Proc(host, [*self.net.exec(host), *argv], web_env, self.logdir))
            shape.hosts[host] = host
        if not self.pg_only:
            worker_env = self.host_env(env, "worker")
            argv = [CELERY, "-A", "resonate_project", "worker", "-l", "info"]
            argv += ["-n", f"hosts-w1-{uuid.uuid4().hex[:6]}@%h"]
            worker = Proc("worker1", [*self.net.exec("worker"), *argv], worker_env, self.logdir)
            shape.workers.append(worker)
            shape.hosts["worker1"] = "worker"
            argv = [CELERY, "-A", "resonate_project", "beat", "-l", "info"]
            argv += ["--pidfile", str(self.workdir / "beat.pid")]
            argv += ["--schedule", str(self.workdir / "beat-schedule")]
            shape.beat = Proc("beat", [*self.net.exec("worker"), *argv], worker_env, self.logdir)
            shape.hosts["beat"] = "worker"
        for web in shape.webs:
            web.start()
        for i in range(len(shape.webs)):
            self.wait_web(i)
        for worker in shape.workers:
            worker.start()
            self.wait_worker(worker)
        if shape.beat is not None:
            shape.beat.start()
        # SDK host i runs a worker of each group, connected to web host i.
        for i, url in enumerate(shape.urls()):
            host = f"sdk{i + 1}"
            for group in ("chaos-a", "chaos-b"):
                pid = f"{group[-1]}{i + 1}"
                cfg = {"group": group, "pid": pid, "ttl_ms": SDK_TTL_MS}
                argv = [str(self.sdk_python), str(SDK_PROGRAM), json.dumps(cfg)]
                sdk = Proc(
                    f"sdk-{pid}",
                    [*self.net.exec(host), *argv],
                    sdk_environment(url, token),
                    self.logdir,
                )
                shape.sdks.append(sdk)
                shape.hosts[sdk.name] = host
        for sdk in shape.sdks:
            sdk.start()
        for sdk in shape.sdks:
            self.wait_sdk(sdk)
        what = (
            "2 web hosts (steps and push in-process), PostgreSQL"
            if self.pg_only
            else ("2 web hosts, a worker host (Celery worker, beat), PostgreSQL, Redis")
        )
        log(f"production shape up on hosts: {what}, 2 SDK hosts (2+2 workers)")
        return shape

    def close(self, keep: bool = False) -> None:
        for host in list(self.net.cut_off):
            with contextlib.suppress(Exception):
                self.net.restore(host)
        super().close(keep=keep)
