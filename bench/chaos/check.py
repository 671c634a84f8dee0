"""The checker: what the issue asks to prove once the load stops and the system has settled.

Client-side facts come from :class:`bench.chaos.load.Seen`; server-side facts from ``POST /``
(promise.get) and from two audit tables that triggers in the run's private database fill on every
task transition and on every change to a settled promise (``cluster.AUDIT_SQL``).
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from .load import Seen, decode, expected


@dataclass
class Fault:
    kind: str
    start: float  # monotonic
    end: float = 0.0
    recovered: float | None = None  # when the canary first succeeded after ``end``
    answered: float | None = None  # when a client request first succeeded after ``end``

    @property
    def recovery_s(self) -> float | None:
        return None if self.recovered is None else self.recovered - self.end

    @property
    def answered_s(self) -> float | None:
        return None if self.answered is None else max(0.0, self.answered - self.end)


@dataclass
class Figures:
    scenario: str
    faults: list[Fault] = field(default_factory=list)
    started: int = 0
    completed: int = 0
    wrong_results: list[str] = field(default_factory=list)
    unstarted: int = 0
    acked_writes: int = 0
    lost_writes: list[str] = field(default_factory=list)
    listeners: int = 0
    never_unblocked: list[str] = field(default_factory=list)
    duplicates: int = 0
    max_error_rate: float = 0.0
    requests_500: int = 0
    requests: int = 0

    def ok(self) -> bool:
        return (
            self.completed == self.started
            and not self.wrong_results
            and not self.lost_writes
            and not self.never_unblocked
            and self.requests_500 == 0
            and all(f.recovered is not None for f in self.faults)
        )

    def row(self) -> dict[str, Any]:
        recoveries = [f.recovery_s for f in self.faults if f.recovery_s is not None]
        answers = [f.answered_s for f in self.faults if f.answered_s is not None]
        return {
            "scenario": self.scenario,
            "faults": [f.kind for f in self.faults],
            "workflows": f"{self.completed}/{self.started}",
            "wrong_results": len(self.wrong_results),
            "acknowledged_writes": self.acked_writes,
            "lost_acknowledged_writes": len(self.lost_writes),
            "listeners": self.listeners,
            "never_unblocked": len(self.never_unblocked),
            "duplicate_deliveries": self.duplicates,
            "answering_s_max": round(max(answers), 1) if answers else None,
            "recovery_s_max": round(max(recoveries), 1) if recoveries else None,
            "unrecovered_faults": sum(1 for f in self.faults if f.recovered is None),
            "max_error_rate": round(self.max_error_rate, 3),
            "client_500s": self.requests_500,
            "requests": self.requests,
        }


def error_rate(seen: Seen, start: float, end: float) -> float:
    """The largest share of failed requests (no answer or 5xx) in any one second of the window."""
    buckets: dict[int, list[int]] = {}
    with seen.lock:
        requests = list(seen.requests)
    for at, _, status in requests:
        if start <= at <= end:
            bucket = buckets.setdefault(int(at - start), [0, 0])
            bucket[0] += 1
            bucket[1] += status == 0 or status >= 500
    return max((bad / total for total, bad in buckets.values() if total), default=0.0)


def figures(
    scenario: str, seen: Seen, faults: list[Fault], window: tuple[float, float], records: Any
) -> Figures:
    """``records(ids)`` returns {id: promise record or None} read through ``POST /``."""
    fig = Figures(scenario, faults)
    with seen.lock:
        workflows = {w: v for w, v in seen.workflows.items() if v[0] == scenario}
        completed = dict(seen.completed)
        settled = {p: v for p, (s, v) in seen.settled.items() if s == scenario}
        created = [p for p, s in seen.created.items() if s == scenario]
        listeners = [k for k, s in seen.listeners.items() if s == scenario]
        unblocks = {k: list(v) for k, v in seen.unblocks.items()}
        fig.unstarted = seen.unstarted[scenario]
        requests = [r for r in seen.requests if window[0] <= r[0] <= window[1]]
    fig.started = len(workflows)
    for wid, (_, n, _) in workflows.items():
        if wid in completed:
            if completed[wid][0] == expected(n):
                fig.completed += 1
            else:
                fig.wrong_results.append(f"{wid}: {completed[wid][0]} != {expected(n)}")
    # Acknowledged writes: every create and settle answered 200 is there, with its value.
    found = records(sorted(set(created) | set(settled)))
    fig.acked_writes = len(created) + len(settled)
    for pid in created:
        if found.get(pid) is None:
            fig.lost_writes.append(f"{pid}: created (200) but not found")
    for pid, value in settled.items():
        record = found.get(pid)
        if record is None or record["state"] != "resolved" or decode(record) != value:
            state = None if record is None else (record["state"], decode(record))
            fig.lost_writes.append(f"{pid}: settled (200) with {value}, now {state}")
    fig.listeners = len(listeners)
    for key in listeners:
        if not unblocks.get(key):
            fig.never_unblocked.append(f"{key[0]} -> {key[1]}")
    fig.duplicates = sum(max(0, len(unblocks.get(k, [])) - 1) for k in listeners)
    fig.requests = len(requests)
    fig.requests_500 = sum(1 for r in requests if r[2] == 500)
    for fault in faults:
        fault.answered = next(
            (at for at, _, status in requests if at >= fault.end and status == 200), None
        )
        until = fault.recovered if fault.recovered is not None else window[1]
        fig.max_error_rate = max(fig.max_error_rate, error_rate(seen, fault.start, until))
    return fig


# --- server-side audits --------------------------------------------------------------------------


@dataclass
class Audit:
    task_transitions: int = 0
    acquires: int = 0
    lease_expiries: int = 0
    fulfills: int = 0
    holder_violations: list[str] = field(default_factory=list)
    settled_changes: list[str] = field(default_factory=list)
    outbox_left: int = 0
    outbox_dead: int = 0
    stale_registrations: int = 0  # stream registry rows unrefreshed for over 70 s


def audit(database_url: str) -> Audit:
    result = Audit()
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT id, old_state, new_state, old_version, new_version, old_pid, new_pid "
            "FROM chaos_task_audit ORDER BY id, seq"
        ).fetchall()
        changes = conn.execute(
            "SELECT id, op, old_state, new_state, old_value, new_value FROM chaos_promise_change"
        ).fetchall()
        result.outbox_left = conn.execute("SELECT count(*) FROM outbox_message").fetchone()[0]  # type: ignore[index]
        result.outbox_dead = conn.execute(
            "SELECT count(*) FROM outbox_message WHERE dead_at IS NOT NULL"
        ).fetchone()[0]  # type: ignore[index]
        stale = time.time_ns() // 1_000_000 - 70_000
        result.stale_registrations = conn.execute(
            "SELECT count(*) FROM outbox_subscriber WHERE seen_at < %s", (stale,)
        ).fetchone()[0]  # type: ignore[index]
    result.task_transitions = len(rows)
    acquired_versions: dict[str, set[int]] = {}
    for tid, old_state, new_state, old_version, new_version, old_pid, new_pid in rows:
        if new_state == "acquired" and (
            old_state != "acquired" or old_version != new_version or old_pid != new_pid
        ):
            result.acquires += 1
            if old_state == "acquired":
                result.holder_violations.append(
                    f"{tid}: acquired by {new_pid}@{new_version} while {old_pid}@{old_version} "
                    "held it"
                )
            versions = acquired_versions.setdefault(tid, set())
            if new_version in versions:
                result.holder_violations.append(f"{tid}: version {new_version} acquired twice")
            versions.add(new_version)
        if old_state == "acquired" and new_state == "pending":
            result.lease_expiries += 1
        if new_state == "fulfilled" and old_state != "fulfilled":
            result.fulfills += 1
    for pid, op, old_state, new_state, old_value, new_value in changes:
        result.settled_changes.append(
            f"{pid}: {op} {old_state}->{new_state} {old_value!r}->{new_value!r}"
        )
    return result


def server_500s(logs: list[Path]) -> Counter[str]:
    """Requests the web processes answered with a 5xx other than 503, per status (their JSON
    request lines), plus the tracebacks they logged."""
    found: Counter[str] = Counter()
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                status = entry.get("status")
                if isinstance(status, int) and status >= 500 and status != 503:
                    found[f"status {status}"] += 1
                message = str(entry.get("message", ""))
                if entry.get("logger") == "django.request" and message.startswith("Internal"):
                    found["status 500 (outside POST /)"] += 1  # Django logs its own 500s so
                elif entry.get("exc") and entry.get("level") in {"ERROR", "CRITICAL"}:
                    found[f"logged error: {entry.get('logger')}"] += 1
            elif line.startswith("Traceback"):
                found["traceback"] += 1
    return found


SDK_500 = re.compile(r"code=500|returned 500|status 500")


def sdk_500s(logs: list[Path]) -> int:
    """500s resonate-sdk logged: a request's ``ServerError`` or its stream's reconnect."""
    return sum(len(SDK_500.findall(path.read_text(errors="replace"))) for path in logs)
