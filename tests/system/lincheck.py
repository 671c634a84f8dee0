"""A linearizability checker for one durable promise's history (Wing & Gong's search, with
Lowe's memoization of (linearized set, state), as in Knossos and Porcupine).

Promises with different ids are independent objects, so a history is checked id by id
(P-compositionality). The sequential model of one id, for plain promises (no
``resonate:target``) whose deadlines nobody reaches:

- absent at first;
- ``promise.create``: absent, it becomes pending with the request's param, deadline and tags,
  and answers that record; present, it answers the record unchanged (200 either way);
- ``promise.settle``: absent, 404; pending, it takes the request's state and value and answers
  the record; settled, it answers the record unchanged (the first verdict wins);
- ``promise.get``: 404 if absent, else the record.

An operation is an invocation and a response, each stamped with ``time.monotonic_ns`` in the
client (just before sending, just after receiving), so the interval holds the server's real
one. An operation whose outcome is unknown (a transport failure, a 5xx) has no response: it may
take effect at any instant after its invocation or not at all, and any answer would do.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

ABSENT = 404


@dataclass(frozen=True, slots=True)
class Record:
    """What a client sees of a promise: its state, param, deadline, tags and value (the data
    and headers of both values). ``createdAt`` and ``settledAt`` are the server's clock, not
    the model's: ``Observations`` checks them apart."""

    state: str
    param: tuple[str | None, tuple[tuple[str, str], ...] | None]
    timeout_at: int
    tags: tuple[tuple[str, str], ...]
    value: tuple[str | None, tuple[tuple[str, str], ...] | None]


type State = Record | None  # None: no promise with this id
type Answer = tuple[int, Record | None]  # (status, record); the record only with 200


def _items(d: dict[str, str] | None) -> tuple[tuple[str, str], ...] | None:
    return None if d is None else tuple(sorted(d.items()))


def value_of(v: dict[str, Any] | None) -> tuple[str | None, tuple[tuple[str, str], ...] | None]:
    """A wire value (``{"headers": …, "data": …}``, either left out) as the model holds it."""
    v = v or {}
    return v.get("data"), _items(v.get("headers"))


def record_of(wire: dict[str, Any]) -> Record:
    """The model's view of a wire promise record."""
    return Record(
        state=wire["state"],
        param=value_of(wire.get("param")),
        timeout_at=int(wire["timeoutAt"]),
        tags=_items(wire.get("tags")) or (),
        value=value_of(wire.get("value")),
    )


@dataclass(frozen=True, slots=True)
class Create:
    param: dict[str, Any]
    timeout_at: int
    tags: dict[str, str] = field(default_factory=dict)

    def born(self) -> Record:
        tags = _items(self.tags) or ()
        return Record("pending", value_of(self.param), self.timeout_at, tags, (None, None))


@dataclass(frozen=True, slots=True)
class Settle:
    state: Literal["resolved", "rejected", "rejected_canceled"]
    value: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Get:
    pass


type Input = Create | Settle | Get


def step(state: State, op: Input) -> tuple[State, Answer]:
    """The sequential model: the state after ``op`` and the answer it gives."""
    if isinstance(op, Create):
        if state is None:
            born = op.born()
            return born, (200, born)
        return state, (200, state)
    if isinstance(op, Settle):
        if state is None:
            return None, (ABSENT, None)
        if state.state == "pending":
            settled = Record(
                op.state, state.param, state.timeout_at, state.tags, value_of(op.value)
            )
            return settled, (200, settled)
        return state, (200, state)
    return state, ((ABSENT, None) if state is None else (200, state))


@dataclass(frozen=True, slots=True)
class Op:
    """One operation on one id: its input, its invocation and response instants (ns, one
    monotonic clock), and the answer seen; ``ret``/``answer`` None: the outcome is unknown."""

    input: Input
    call: int
    ret: int | None
    answer: Answer | None
    client: int = -1
    note: str = ""

    @property
    def known(self) -> bool:
        return self.ret is not None and self.answer is not None


@dataclass(slots=True)
class _Entry:
    op_index: int
    is_call: bool
    time: int
    match: _Entry | None = None
    prev: _Entry | None = None
    next: _Entry | None = None


def _lift(call: _Entry) -> None:
    assert call.prev is not None
    assert call.match is not None
    assert call.match.prev is not None
    call.prev.next = call.next
    if call.next is not None:
        call.next.prev = call.prev
    ret = call.match
    ret.prev.next = ret.next  # type: ignore[union-attr]
    if ret.next is not None:
        ret.next.prev = ret.prev


def _unlift(call: _Entry) -> None:
    ret = call.match
    assert ret is not None
    assert ret.prev is not None
    assert call.prev is not None
    ret.prev.next = ret
    if ret.next is not None:
        ret.next.prev = ret
    call.prev.next = call
    if call.next is not None:
        call.next.prev = call


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    ops: int
    explored: int  # configurations (linearized set, state) visited
    order: tuple[int, ...] = ()  # a linearization (indexes into the history), when ok
    longest: tuple[int, ...] = ()  # the longest linearizable prefix found, when not


def check(history: Sequence[Op], init: State = None, budget: int = 5_000_000) -> Verdict:
    """Whether ``history`` (one id's operations) is linearizable with respect to ``step``.

    Wing & Gong's search over the history's invocation and response events in real-time order:
    an operation may be linearized next if it is invoked before every pending response, its
    answer is the model's, and (linearized set, state) was not reached before. Reaching a
    response whose operation is not linearized backtracks. Operations with unknown outcome
    respond at infinity and accept any answer, so they may be linearized anywhere after their
    invocation (at the end, which is the same as never). Ties (a response and an invocation at
    the same nanosecond) count as concurrent. ``budget`` bounds the configurations explored;
    past it the check raises rather than answer wrongly."""
    n = len(history)
    if n == 0:
        return Verdict(True, 0, 0)
    infinity = max(max(o.call, o.ret or 0) for o in history) + 1
    events: list[_Entry] = []
    for i, o in enumerate(history):
        ret_time = o.ret if o.known and o.ret is not None else infinity
        assert ret_time >= o.call, f"operation {i} responds before its invocation"
        c = _Entry(i, True, o.call)
        r = _Entry(i, False, ret_time)
        c.match = r
        events += [c, r]
    # Invocations before responses at the same instant: concurrent, the permissive reading.
    events.sort(key=lambda e: (e.time, not e.is_call, e.op_index))
    head = _Entry(-1, True, -1)
    prev = head
    for e in events:
        prev.next = e
        e.prev = prev
        prev = e

    seen: set[tuple[int, State]] = set()
    stack: list[tuple[_Entry, State]] = []
    state: State = init
    linearized = 0
    longest: tuple[int, ...] = ()
    explored = 0
    entry = head.next
    while head.next is not None:
        assert entry is not None
        if entry.is_call:
            o = history[entry.op_index]
            after, answer = step(state, o.input)
            if not o.known or answer == o.answer:
                marked = linearized | (1 << entry.op_index)
                if (marked, after) not in seen:
                    seen.add((marked, after))
                    explored += 1
                    if explored > budget:
                        raise RuntimeError(f"linearizability search over {n} ops passed {budget}")
                    stack.append((entry, state))
                    if len(stack) > len(longest):
                        longest = tuple(e.op_index for e, _ in stack)
                    state, linearized = after, marked
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:
            if not stack:
                return Verdict(False, n, explored, longest=longest)
            entry, state = stack.pop()
            linearized &= ~(1 << entry.op_index)
            _unlift(entry)
            entry = entry.next
    return Verdict(True, n, explored, order=tuple(e.op_index for e, _ in stack))


def read_only(op: Op) -> bool:
    """Whether ``op``'s answer shows it changed nothing, wherever it is linearized: a get, a 404,
    a create answered with a record it did not make, a settle answered with a verdict not its
    own (or an answer the model never gives, so no placement exists at all)."""
    if not op.known or op.answer is None:
        return False  # it may have taken effect
    if isinstance(op.input, Get):
        return True
    status, rec = op.answer
    if rec is None or status != 200:
        return True
    if isinstance(op.input, Create):
        return rec != op.input.born()
    return rec.state != op.input.state or rec.value != value_of(op.input.value)


def minimal(history: Sequence[Op]) -> list[Op]:
    """A smaller non-linearizable history inside ``history`` (itself not linearizable):
    read-only operations (``read_only``) are dropped one at a time while what is left stays
    non-linearizable. Only those: one that changed nothing can be dropped from any
    linearization, so if ``history`` were linearizable what is left would be too, and what is
    left is a witness on its own. Dropping a write proves nothing (a get then sees a promise
    nobody created)."""
    kept = list(history)
    assert not check(kept).ok
    i = 0
    while i < len(kept):
        if read_only(kept[i]):
            trial = kept[:i] + kept[i + 1 :]
            if not check(trial).ok:
                kept = trial
                continue
        i += 1
    return kept


def show(history: Sequence[Op]) -> str:
    """One line per operation, in invocation order, times in µs from the first invocation."""
    if not history:
        return "(empty)"
    t0 = min(o.call for o in history)
    lines = []
    for i, o in sorted(enumerate(history), key=lambda p: p[1].call):
        end = "   ?" if o.ret is None else f"{(o.ret - t0) / 1000:10.0f}"
        answer = "unknown" if o.answer is None else _show_answer(o.answer)
        lines.append(
            f"#{i:<3} client {o.client:<3} [{(o.call - t0) / 1000:10.0f} µs, {end} µs] "
            f"{_show_input(o.input)} -> {answer}{'  ' + o.note if o.note else ''}"
        )
    return "\n".join(lines)


def _show_input(op: Input) -> str:
    if isinstance(op, Create):
        return f"create(param={op.param.get('data')!r})"
    if isinstance(op, Settle):
        return f"settle({op.state}, {op.value.get('data')!r})"
    return "get()"


def _show_answer(answer: Answer) -> str:
    status, rec = answer
    if rec is None:
        return str(status)
    return f"{status} {rec.state} param={rec.param[0]!r} value={rec.value[0]!r}"


@dataclass
class Observations:
    """The server-clock fields checked apart from the model: every record of one id shows the
    same ``createdAt``, every settled record the same ``settledAt`` (``check``), and no
    ``settledAt`` comes before its ``createdAt`` (``inversions``, which the test refuses: each
    request reads the clock as it arrives, so a settle that arrived first but ran after the
    create it raced would carry the earlier instant, were it not stamped no earlier than the
    birth)."""

    created: dict[str, set[int]] = field(default_factory=dict)
    settled: dict[str, set[int]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    inversions: dict[str, tuple[int, int]] = field(default_factory=dict)

    def see(self, promise_id: str, wire: dict[str, Any]) -> None:
        if wire.get("id") != promise_id:
            self.problems.append(f"{promise_id}: answered the record of {wire.get('id')!r}")
        self.created.setdefault(promise_id, set()).add(int(wire["createdAt"]))
        if wire["state"] == "pending":
            if "settledAt" in wire:
                self.problems.append(f"{promise_id}: pending with a settledAt")
        elif "settledAt" not in wire:
            self.problems.append(f"{promise_id}: {wire['state']} without a settledAt")
        else:
            self.settled.setdefault(promise_id, set()).add(int(wire["settledAt"]))
            if int(wire["settledAt"]) < int(wire["createdAt"]):
                self.inversions[promise_id] = (int(wire["createdAt"]), int(wire["settledAt"]))

    def check(self) -> list[str]:
        found = list(self.problems)
        for name, seen in (("createdAt", self.created), ("settledAt", self.settled)):
            for promise_id, values in seen.items():
                if len(values) > 1:
                    found.append(f"{promise_id}: several {name}: {sorted(values)}")
        return found


def overlapping(history: Sequence[Op]) -> int:
    """How many operations overlap in time another operation of the same history."""
    ends = [o.ret if o.ret is not None else float("inf") for o in history]
    count = 0
    for i, o in enumerate(history):
        if any(j != i and p.call <= ends[i] and o.call <= ends[j] for j, p in enumerate(history)):
            count += 1
    return count


def by_id(ops: Iterable[tuple[str, Op]]) -> dict[str, list[Op]]:
    out: dict[str, list[Op]] = {}
    for promise_id, op in ops:
        out.setdefault(promise_id, []).append(op)
    return out
