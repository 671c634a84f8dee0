"""The cron dialect (spec: opaque ``nextCron``). Five fields as usual, or six with seconds first
as the reference server accepts; evaluated in UTC; instants are integer milliseconds."""

from __future__ import annotations

from croniter import croniter

# A valid expression may still never match (30 February) or match very rarely; refuse any whose
# occurrences lie more than this far apart, which also bounds the search's cost.
MAX_YEARS_BETWEEN = 8
# 9999-12-31 23:59:59.999 UTC: croniter computes in datetimes, which end there, so no schedule
# can run later (a stored instant may be larger: timeoutAt goes up to 2**63 - 1).
LAST_RUN_MS = 253_402_300_799_999


class NoNextRun(ValueError):
    """A cron expression has no occurrence after an instant up to ``LAST_RUN_MS``, raised by
    ``next_after``: ``schedule.create`` answers 400 naming it; for the schedule step it means the
    occurrence it just fired was the schedule's last."""

    def __init__(self, expr: str, instant_ms: int) -> None:
        super().__init__(
            f"cron {expr!r} has no occurrence after {instant_ms} ms that a schedule can run at: "
            f"the last is 9999-12-31 23:59:59.999 UTC ({LAST_RUN_MS} ms)"
        )
        self.expr = expr
        self.instant_ms = instant_ms


def _seconds_first(expr: str) -> bool:
    return len(expr.split()) == 6


def valid(expr: str) -> bool:
    fields = expr.split()
    if len(fields) not in (5, 6):
        return False
    try:
        if not croniter.is_valid(expr, second_at_beginning=_seconds_first(expr)):
            return False
        croniter(
            expr,
            0,
            second_at_beginning=_seconds_first(expr),
            max_years_between_matches=MAX_YEARS_BETWEEN,
        ).get_next(float)
    except Exception:  # croniter raises assorted errors for odd input; all mean "not valid"
        return False
    return True


def next_after(expr: str, instant_ms: int) -> int:
    """The first occurrence strictly after ``instant_ms`` of a ``valid`` expression; raises
    ``NoNextRun`` when it would lie past ``LAST_RUN_MS``."""
    if instant_ms >= LAST_RUN_MS:
        raise NoNextRun(expr, instant_ms)
    try:
        return _next_after(expr, instant_ms)
    except (OverflowError, ValueError) as exc:  # croniter stepped past year 9999
        raise NoNextRun(expr, instant_ms) from exc


def _next_after(expr: str, instant_ms: int) -> int:
    it = croniter(
        expr,
        instant_ms / 1000,
        second_at_beginning=_seconds_first(expr),
        max_years_between_matches=MAX_YEARS_BETWEEN,
    )
    nxt = round(it.get_next(float) * 1000)
    if nxt <= instant_ms:  # guard against float rounding at millisecond boundaries
        it = croniter(
            expr,
            (instant_ms + 1) / 1000,
            second_at_beginning=_seconds_first(expr),
            max_years_between_matches=MAX_YEARS_BETWEEN,
        )
        nxt = round(it.get_next(float) * 1000)
    return nxt
