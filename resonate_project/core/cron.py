"""The cron dialect (spec: opaque ``nextCron``). Five fields as usual, or six with seconds first
as the reference server accepts; evaluated in UTC; instants are integer milliseconds."""

from __future__ import annotations

from croniter import croniter

# A valid expression may still never match (30 February) or match very rarely; refuse any whose
# occurrences lie more than this far apart, which also bounds the search's cost.
MAX_YEARS_BETWEEN = 8


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
    """The first occurrence strictly after ``instant_ms``."""
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
