"""The four tags with protocol meaning (spec §6). Everything else is stored and echoed only."""

from __future__ import annotations

import re
from collections.abc import Mapping

TARGET = "resonate:target"
TIMER = "resonate:timer"
EXTERNAL = "resonate:external"
DELAY = "resonate:delay"
BRANCH = "resonate:branch"  # no protocol meaning; indexed because preload groups by it
SCHEDULE = "resonate:schedule"
SCOPE = "resonate:scope"
PARENT = "resonate:parent"  # the call tree (admin, CLI); no protocol meaning
ORIGIN = "resonate:origin"

_NON_DIGITS = re.compile(r"[^0-9]")
DELAY_DIGITS_MAX = 19  # 10**19 > 2**63 - 1, the largest storable instant


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
    base 10, junk ignored); we keep that totality but fold only the digits, in linear time: past
    19 significant digits the value exceeds every storable instant, so it saturates at ``10**19``
    (callers cap the instant at the promise's deadline anyway). Requests cap the tag's length at
    ``MAX_DELAY_CHARS``; this bound covers rows stored before that cap."""
    digits = _NON_DIGITS.sub("", value).lstrip("0")
    if len(digits) > DELAY_DIGITS_MAX:
        return 10**DELAY_DIGITS_MAX
    return int(digits) if digits else 0
