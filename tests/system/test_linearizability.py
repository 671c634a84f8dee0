"""Every history clients observe of plain promises is linearizable, with group commit on.

The server answers the requests waiting together in one transaction (``edges.api.together``),
possibly reordering or combining them, and no answer leaves before the COMMIT. Here a real
``manage.py serve`` (two web processes on PostgreSQL; the embedded server on a SQLite file)
takes ``promise.create``, ``promise.settle`` and ``promise.get`` from many keep-alive clients at
once on a few ids at a time, each request stamped with the client's monotonic clock before it is
sent and after its answer is read. Each id's history is then checked against the sequential
model of one promise (``tests/system/lincheck.py``, Wing & Gong's search with memoization); ids
are independent objects, so checking them one by one checks the whole (P-compositionality).

The first tests check the checker: hand-made histories it must reject and accept, and random
histories built from the model itself, which it must accept.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import psycopg
import pytest

from .conftest import unavailable
from .harness import (
    FAR,
    PG_ADMIN_URL,
    PG_URL,
    Outbox,
    Stack,
    base_env,
    create_pg_database,
    drop_pg_database,
    free_port,
    migrate,
)
from .lincheck import (
    ABSENT,
    Create,
    Get,
    Input,
    Observations,
    Op,
    Record,
    Settle,
    State,
    by_id,
    check,
    minimal,
    overlapping,
    read_only,
    record_of,
    show,
    step,
)

pytestmark = pytest.mark.integration

# --- the checker, on hand-made histories ----------------------------------------------------------

T = FAR  # every hand-made promise's deadline


def born(param: str) -> Record:
    return Create({"data": param}, T).born()


def settled(param: str, state: str, value: str) -> Record:
    return Record(state, (param, None), T, (), (value, None))


def create(call: int, ret: int | None, param: str, seen: Record | None) -> Op:
    answer = None if ret is None else (200, seen)
    return Op(Create({"data": param}, T), call, ret, answer)


def settle(call: int, ret: int | None, state: str, value: str, seen: Record | None) -> Op:
    answer = None if ret is None else ((ABSENT, None) if seen is None else (200, seen))
    verdict = cast(Literal["resolved", "rejected", "rejected_canceled"], state)
    return Op(Settle(verdict, {"data": value}), call, ret, answer)


def get(call: int, ret: int, seen: Record | None) -> Op:
    return Op(Get(), call, ret, (ABSENT, None) if seen is None else (200, seen))


def test_two_winning_settles_are_rejected() -> None:
    history = [
        create(0, 10, "a", born("a")),
        settle(20, 40, "resolved", "x", settled("a", "resolved", "x")),
        settle(21, 41, "rejected", "y", settled("a", "rejected", "y")),
    ]
    assert not check(history).ok


def test_one_winning_settle_seen_by_both_is_accepted() -> None:
    winner = settled("a", "rejected", "y")
    history = [
        create(0, 10, "a", born("a")),
        settle(20, 40, "resolved", "x", winner),
        settle(21, 41, "rejected", "y", winner),
        get(22, 30, born("a")),  # concurrent with both: may read before either
        get(42, 50, winner),
    ]
    verdict = check(history)
    assert verdict.ok
    assert verdict.order.index(2) < verdict.order.index(1)


def test_a_settled_read_before_the_settle_began_is_rejected() -> None:
    history = [
        create(0, 10, "a", born("a")),
        get(20, 30, settled("a", "resolved", "x")),
        settle(40, 50, "resolved", "x", settled("a", "resolved", "x")),
    ]
    assert not check(history).ok
    # The same read overlapping the settle is fine.
    history[1] = get(20, 45, settled("a", "resolved", "x"))
    assert check(history).ok


def test_a_stale_read_after_a_settle_returned_is_rejected() -> None:
    history = [
        create(0, 10, "a", born("a")),
        settle(20, 30, "resolved", "x", settled("a", "resolved", "x")),
        get(40, 50, born("a")),
    ]
    assert not check(history).ok


def test_a_later_create_winning_over_a_returned_one_is_rejected() -> None:
    history = [
        create(0, 10, "a", born("a")),
        create(20, 30, "b", born("b")),  # began after the first returned, yet its param won
    ]
    assert not check(history).ok
    history[1] = create(20, 30, "b", born("a"))
    assert check(history).ok


def test_the_first_create_showing_a_later_creates_param_is_rejected() -> None:
    history = [
        create(0, 10, "a", born("b")),
        create(20, 30, "b", born("b")),
    ]
    assert not check(history).ok


def test_concurrent_creates_agree_on_one_winner() -> None:
    history = [
        create(0, 50, "a", born("b")),
        create(5, 40, "b", born("b")),
        create(6, 45, "c", born("b")),
    ]
    assert check(history).ok
    history[2] = create(6, 45, "c", born("c"))  # two winners
    assert not check(history).ok


def test_a_404_is_only_fine_before_the_create_took_effect() -> None:
    history = [
        create(10, 30, "a", born("a")),
        settle(0, 20, "resolved", "x", None),  # overlaps the create: may come first
        get(5, 25, None),
    ]
    assert check(history).ok
    history[2] = get(35, 40, None)  # the create returned: the promise exists
    assert not check(history).ok
    history[2] = get(35, 40, born("a"))
    history[1] = settle(31, 33, "resolved", "x", None)
    assert not check(history).ok


def test_a_settle_answering_the_pending_record_is_rejected() -> None:
    """A settle of a pending promise settles it; answering 200 with the record still pending
    (neither applied nor refused) is a lost write, whatever overlaps it."""
    history = [
        settle(0, 30, "resolved", "x", born("a")),
        create(10, 20, "a", born("a")),
        get(35, 38, born("a")),
        settle(40, 50, "rejected", "y", settled("a", "rejected", "y")),
    ]
    assert not check(history).ok
    assert minimal(history) == [history[0], history[1], history[3]]


def test_a_settle_seen_on_an_absent_promise_is_rejected() -> None:
    history = [settle(0, 10, "resolved", "x", settled("a", "resolved", "x"))]
    assert not check(history).ok
    assert check([settle(0, 10, "resolved", "x", None), get(20, 30, None)]).ok


def test_a_winner_other_than_the_one_reads_saw_is_rejected() -> None:
    history = [
        create(0, 10, "a", born("a")),
        settle(20, 40, "resolved", "x", settled("a", "resolved", "x")),
        get(50, 60, settled("a", "rejected", "y")),
        settle(21, 41, "rejected", "y", settled("a", "resolved", "x")),
    ]
    assert not check(history).ok


def test_an_unknown_outcome_may_or_may_not_have_taken_effect() -> None:
    lost = settle(20, None, "rejected", "y", None)
    took = [
        create(0, 10, "a", born("a")),
        lost,
        get(30, 40, settled("a", "rejected", "y")),
    ]
    assert check(took).ok
    did_not = [create(0, 10, "a", born("a")), lost, get(30, 40, born("a"))]
    assert check(did_not).ok
    # But never before it was invoked, and nothing else invents a value.
    early = [create(0, 10, "a", born("a")), get(11, 15, settled("a", "rejected", "y")), lost]
    assert not check(early).ok
    made_up = [create(0, 10, "a", born("a")), lost, get(30, 40, settled("a", "rejected", "z"))]
    assert not check(made_up).ok


def test_a_record_changing_its_deadline_or_tags_is_rejected() -> None:
    other = Record("pending", ("a", None), T + 1, (), (None, None))
    assert not check([create(0, 10, "a", born("a")), get(20, 30, other)]).ok
    tagged = Record("pending", ("a", None), T, (("k", "v"),), (None, None))
    assert not check([create(0, 10, "a", born("a")), get(20, 30, tagged)]).ok


def test_minimal_keeps_a_witness_and_drops_the_reads_that_do_not_matter() -> None:
    win_x, win_y = settled("a", "resolved", "x"), settled("a", "rejected", "y")
    history = [
        create(0, 10, "a", born("a")),
        get(11, 12, born("a")),
        settle(20, 40, "resolved", "x", win_x),
        get(41, 42, win_x),
        get(43, 44, win_y),  # flips the verdict
        get(45, 46, win_x),
        settle(21, 50, "rejected", "y", win_x),
    ]
    assert not check(history).ok
    core = minimal(history)
    assert not check(core).ok
    assert len(core) < len(history)
    assert history[4] in core
    assert all(o in core for o in history[:1] + history[2:3])  # the writes stay


def test_read_only_answers() -> None:
    assert read_only(get(0, 1, None))
    assert read_only(create(0, 1, "a", born("b")))
    assert not read_only(create(0, 1, "a", born("a")))
    assert not read_only(create(0, None, "a", None))  # unknown: it may have taken effect
    assert read_only(settle(0, 1, "resolved", "x", None))
    assert read_only(settle(0, 1, "resolved", "x", settled("a", "resolved", "y")))
    assert read_only(settle(0, 1, "resolved", "x", settled("a", "rejected", "x")))
    assert read_only(settle(0, 1, "resolved", "x", born("a")))
    assert not read_only(settle(0, 1, "resolved", "x", settled("a", "resolved", "x")))


def model_history(rng: random.Random, n: int, clients: int) -> list[Op]:
    """A linearizable history by construction: ``n`` operations from ``clients`` clients, each
    applied to the model at an instant inside its own interval, in the order of those instants.
    Some outcomes are dropped (unknown), as a transport failure would."""
    free_at = [0] * clients
    planned: list[tuple[int, int, int, int, Input]] = []  # (point, call, ret, client, input)
    for _ in range(n):
        c = rng.randrange(clients)
        call = free_at[c] + rng.randrange(1, 30)
        ret = call + rng.randrange(1, 80)
        point = rng.randrange(call, ret + 1)
        free_at[c] = ret
        roll = rng.random()
        op: Input
        if roll < 0.35:
            op = Create({"data": f"p{rng.randrange(1000)}"}, T)
        elif roll < 0.7:
            state = rng.choice(["resolved", "rejected", "rejected_canceled"])
            op = Settle(state, {"data": f"v{rng.randrange(1000)}"})  # type: ignore[arg-type]
        else:
            op = Get()
        planned.append((point, call, ret, c, op))
    planned.sort(key=lambda p: p[0])
    now: State = None
    history = []
    for _, call, ret, c, op in planned:
        now, answer = step(now, op)
        if rng.random() < 0.05:
            history.append(Op(op, call, None, None, client=c))
        else:
            history.append(Op(op, call, ret, answer, client=c))
    rng.shuffle(history)
    return history


def test_histories_built_from_the_model_are_accepted() -> None:
    rng = random.Random(20260101)
    for _ in range(300):
        history = model_history(rng, rng.randrange(1, 24), rng.randrange(1, 10))
        assert check(history).ok, show(history)


def test_an_impossible_answer_is_always_caught() -> None:
    """Not vacuous: one answer in a model history replaced by a record no operation could have
    made (a param or value nobody sent) is caught, in every history."""
    rng = random.Random(7)
    caught = tried = 0
    for _ in range(300):
        history = model_history(rng, rng.randrange(4, 20), rng.randrange(2, 8))
        known = [i for i, o in enumerate(history) if o.known and o.answer is not None]
        i = rng.choice(known)
        o = history[i]
        assert o.answer is not None
        rec = o.answer[1]
        if rec is None:
            bogus: tuple[int, Record | None] = (200, born("nobody"))
        else:
            bogus = (200, settled(str(rec.param[0]), "resolved", "nobody"))
        history[i] = Op(o.input, o.call, o.ret, bogus)
        tried += 1
        caught += not check(history).ok
    assert caught == tried  # "nobody" never was a param or a value: always impossible


def test_observations_catch_a_changed_creation_or_settlement_instant() -> None:
    obs = Observations()
    base = {"id": "p", "state": "pending", "createdAt": 5, "timeoutAt": T}
    obs.see("p", base)
    obs.see("p", {**base, "state": "resolved", "settledAt": 9})
    assert obs.check() == []
    obs.see("p", {**base, "state": "resolved", "settledAt": 10})
    obs.see("p", {**base, "createdAt": 6})
    assert len(obs.check()) == 2
    assert obs.inversions == {}
    obs.see("q", {**base, "id": "q", "state": "resolved", "settledAt": 4})
    assert obs.inversions == {"q": (5, 4)}


# --- the run against a real server ---------------------------------------------------------------

CLIENTS_PG = 14
CLIENTS_SQLITE = 12
IDS_PER_ROUND = 4
OPS_PER_ROUND = 5  # per client: ~17 operations on each id per round, most of them overlapping
# Seconds of load on PostgreSQL (SQLite gets 70% of it); a longer run by hand:
# LINCHECK_SECONDS=120 .venv/bin/python -m pytest tests/system/test_linearizability.py
SECONDS = float(os.environ.get("LINCHECK_SECONDS", "10"))


@dataclass
class Run:
    """What the clients saw: each operation with its id, the server-clock fields, counts."""

    ops: list[tuple[str, Op]] = field(default_factory=list)
    observations: Observations = field(default_factory=Observations)
    statuses: dict[int, int] = field(default_factory=dict)
    transport_errors: list[str] = field(default_factory=list)
    rounds: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Client:
    """One keep-alive HTTP/1.1 connection to ``POST /``."""

    def __init__(self, base_url: str) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)

    def post(self, body: bytes) -> tuple[int, Any]:
        self.conn.request("POST", "/", body, {"Content-Type": "application/json"})
        res = self.conn.getresponse()
        payload = res.read()
        reply = json.loads(payload)
        if reply["head"]["status"] != res.status:
            raise AssertionError(f"head.status {reply['head']['status']} != HTTP {res.status}")
        return res.status, reply["data"]

    def reset(self) -> None:
        self.conn.close()
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)


def request_for(rng: random.Random, promise_id: str, token: str) -> tuple[str, Input, Any]:
    roll = rng.random()
    if roll < 0.35:
        headers = {"h": token} if rng.random() < 0.3 else None
        param: dict[str, Any] = {"data": f"p-{token}"}
        if headers:
            param["headers"] = headers
        timeout_at = FAR + rng.randrange(10**9)
        tags = {"lin": token}
        data = {"id": promise_id, "timeoutAt": timeout_at, "param": param, "tags": tags}
        return "promise.create", Create(param, timeout_at, tags), data
    if roll < 0.7:
        state = rng.choice(["resolved", "rejected", "rejected_canceled"])
        value = {"data": f"v-{token}"}
        data = {"id": promise_id, "state": state, "value": value}
        return "promise.settle", Settle(state, value), data  # type: ignore[arg-type]
    return "promise.get", Get(), {"id": promise_id}


def hammer(base_url: str, clients: int, seconds: float, seed: int) -> Run:
    """``clients`` threads, in rounds: each round names ``IDS_PER_ROUND`` fresh ids and every
    client sends ``OPS_PER_ROUND`` random requests on them, then waits for the others (so every
    round starts with all clients on the same fresh ids at once)."""
    run = Run()
    prefix = f"lin-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + seconds
    current: dict[str, Any] = {"ids": [f"{prefix}-0-{k}" for k in range(IDS_PER_ROUND)]}
    stop = threading.Event()

    def next_round() -> None:
        run.rounds += 1
        if time.monotonic() >= deadline:
            stop.set()
        current["ids"] = [f"{prefix}-{run.rounds}-{k}" for k in range(IDS_PER_ROUND)]

    barrier = threading.Barrier(clients, action=next_round)
    failures: list[BaseException] = []

    def client(n: int) -> None:
        rng = random.Random(seed * 1000 + n)
        conn = Client(base_url)
        seq = 0
        mine: list[tuple[str, Op]] = []
        try:
            while not stop.is_set():
                ids = current["ids"]
                for _ in range(OPS_PER_ROUND):
                    seq += 1
                    promise_id = rng.choice(ids)
                    kind, op_input, data = request_for(rng, promise_id, f"{n}.{seq}")
                    corr = f"{n}.{seq}"
                    body = json.dumps({"kind": kind, "head": {"corrId": corr}, "data": data})
                    call = time.monotonic_ns()
                    try:
                        status, reply = conn.post(body.encode())
                    except (OSError, http.client.HTTPException, ValueError) as exc:
                        with run.lock:
                            run.transport_errors.append(f"{kind} {promise_id}: {exc!r}")
                        mine.append((promise_id, Op(op_input, call, None, None, client=n)))
                        conn.reset()
                        continue
                    ret = time.monotonic_ns()
                    with run.lock:
                        run.statuses[status] = run.statuses.get(status, 0) + 1
                    if status >= 500:
                        mine.append((promise_id, Op(op_input, call, None, None, n, f"{status}")))
                        continue
                    answer: tuple[int, Record | None]
                    if status == 200:
                        answer = (200, record_of(reply["promise"]))
                        with run.lock:
                            run.observations.see(promise_id, reply["promise"])
                    else:  # 404 is the model's; anything else is an answer it never gives
                        answer = (status, None)
                    note = "" if status in (200, ABSENT) else json.dumps(reply)[:200]
                    mine.append((promise_id, Op(op_input, call, ret, answer, n, note)))
                barrier.wait(timeout=60)
        except threading.BrokenBarrierError:
            pass
        except BaseException as exc:
            failures.append(exc)
            barrier.abort()
        finally:
            conn.conn.close()
            with run.lock:
                run.ops.extend(mine)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 90)
    assert not any(t.is_alive() for t in threads), "a client never finished"
    if failures:
        raise failures[0]
    return run


def verify(run: Run, label: str) -> None:
    """Every id's history is linearizable, the server clock's fields agree, no 5xx, no transport
    error: every problem is printed, then the first ones fail the test."""
    histories = by_id(run.ops)
    started = time.monotonic()
    failed: list[str] = []
    explored = 0
    for promise_id, history in histories.items():
        verdict = check(history)
        explored += verdict.explored
        if not verdict.ok:
            core = minimal(history)
            failed.append(
                f"{promise_id}: {len(history)} operations, not linearizable; a witness of "
                f"{len(core)}:\n{show(core)}\nthe whole history:\n{show(history)}"
            )
    took = time.monotonic() - started
    per_id = [len(h) for h in histories.values()]
    overlaps = sum(overlapping(h) for h in histories.values())
    # The plainest symptom of a lost write: a settle answered 200 with the promise pending.
    unsettled = sum(
        1
        for _, o in run.ops
        if isinstance(o.input, Settle)
        and o.answer is not None
        and o.answer[1] is not None
        and o.answer[1].state == "pending"
    )
    inversions = run.observations.inversions
    example = f" (e.g. {next(iter(inversions.items()))})" if inversions else ""
    print(
        f"\n[{label}] {len(run.ops)} operations on {len(histories)} ids in {run.rounds} rounds "
        f"(up to {max(per_id)} per id, {overlaps} overlapping another on their id), "
        f"statuses {dict(sorted(run.statuses.items()))}, "
        f"{len(run.transport_errors)} transport errors; checked in {took:.2f}s "
        f"({explored} configurations): {len(failed)} ids not linearizable, "
        f"{unsettled} settles answered pending; {len(inversions)} ids show settledAt before "
        f"createdAt{example}"
    )
    problems: list[str] = []
    if failed:
        print("\n\n".join(failed))
        problems.append(f"{len(failed)} ids not linearizable; the first:\n{failed[0]}")
    problems += run.observations.check()[:10]
    if inversions:  # a settle that raced its create is stamped no earlier than the birth
        problems.append(f"{len(inversions)} ids show settledAt before createdAt{example}")
    fives = {s: n for s, n in run.statuses.items() if s >= 500}
    if fives:
        problems.append(f"5xx answers: {fives}")
    problems += run.transport_errors[:5]
    unexpected = {s: n for s, n in run.statuses.items() if s not in (200, ABSENT)}
    if unexpected:
        problems.append(f"answers the model never gives: {unexpected}")
    assert not problems, "\n".join(problems)
    # The load did what it is for: many ids, most operations overlapping others on their id.
    assert len(histories) >= 20
    assert run.statuses.get(ABSENT, 0) > 0
    assert run.statuses.get(200, 0) > 0
    assert overlaps > len(run.ops) // 2


def commits(name: str) -> int:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0]) if row else 0


def require_postgres() -> None:
    """PostgreSQL is a real dependency: unreachable under CI=true fails, elsewhere the run is
    skipped with the reason (tests/system/conftest.py's rule)."""
    try:
        psycopg.connect(PG_ADMIN_URL, connect_timeout=5).close()
    except Exception as exc:
        unavailable("linearizability", f"PostgreSQL unreachable at {PG_ADMIN_URL}: {exc}")


@contextlib.contextmanager
def postgres_server(logdir: Path) -> Iterator[tuple[Stack, str]]:
    """Two web processes (each with its envelope threads, group commit at its default) on one
    fresh PostgreSQL database; plain promises need no Celery."""
    require_postgres()
    name = create_pg_database()
    stack = None
    try:
        env = base_env(PG_URL.format(name=name), None, {})
        migrate(env)
        stack = Stack("web", f"http://127.0.0.1:{free_port()}", env, logdir, Outbox(name))
        stack.start_web("--no-embedded", "--workers", "2")
        yield stack, name
    finally:
        if stack is not None:
            stack.stop()
        drop_pg_database(name)


def test_postgresql_histories_are_linearizable(tmp_path: Path) -> None:
    with postgres_server(tmp_path) as (stack, name):
        before = commits(name)
        run = hammer(stack.base_url, CLIENTS_PG, SECONDS, seed=1)
        time.sleep(1.0)  # the backends report their counts at most once a second
        committed = commits(name) - before
        alive = stack.procs["web"].alive()
        tails = stack.tails()
    assert alive, tails
    print(f"\n[postgresql] {committed} transactions committed for {len(run.ops)} requests")
    verify(run, "postgresql")
    # Group commit was at work: a request alone is at least one transaction of its own.
    assert committed < len(run.ops), (committed, len(run.ops))


def test_sqlite_histories_are_linearizable(tmp_path: Path) -> None:
    db = tmp_path / "resonate.sqlite3"
    env = base_env(f"sqlite:///{db}", None, {})
    migrate(env)
    stack = Stack("embedded", f"http://127.0.0.1:{free_port()}", env, tmp_path, Outbox(None, db))
    try:
        stack.start_web()
        run = hammer(stack.base_url, CLIENTS_SQLITE, SECONDS * 0.7, seed=2)
        alive = stack.procs["web"].alive()
    finally:
        stack.stop()
    assert alive, stack.tails()
    verify(run, "sqlite")
