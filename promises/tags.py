"""The four tags with protocol meaning (spec §6). Everything else is stored and echoed only."""

from __future__ import annotations

from collections.abc import Mapping

TARGET = "resonate:target"
TIMER = "resonate:timer"
EXTERNAL = "resonate:external"
DELAY = "resonate:delay"
BRANCH = "resonate:branch"  # no protocol meaning; indexed because preload groups by it
SCHEDULE = "resonate:schedule"
SCOPE = "resonate:scope"


def is_timer(tags: Mapping[str, str]) -> bool:
    return tags.get(TIMER) == "true"


def is_targeted(tags: Mapping[str, str]) -> bool:
    return TARGET in tags


def is_external(tags: Mapping[str, str]) -> bool:
    """External promises may carry callbacks/listeners and get a durable timeout (C1-C3).

    The spec's rule is ``resonate:external="true"``, targeted, or a timer. ``resonate:scope=
    "global"`` is accepted as well (deviation): the TypeScript SDK marks awaitable promises
    (``ctx.promise()``) only that way, and the reference server 0.10 counts it as external.
    """
    return (
        tags.get(EXTERNAL) == "true"
        or is_targeted(tags)
        or is_timer(tags)
        or tags.get(SCOPE) == "global"
    )


def parse_delay(value: str) -> int:
    """``resonate:delay`` is an absolute instant in ms. The spec's parse is total (digits folded in
    base 10, junk ignored); we keep that totality but fold only the digits."""
    result = 0
    for ch in value:
        if "0" <= ch <= "9":
            result = result * 10 + (ord(ch) - 48)
    return result
