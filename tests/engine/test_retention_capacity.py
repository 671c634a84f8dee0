"""Retention under the default settings against the write rate issue #26 calls modest (20
workflows a second): what the step runner's ticks delete must keep up with what is written, or
the tables grow forever. Found by ``make bench``'s growth section (bench/run.py, 8)."""

from __future__ import annotations

from typing import Any

from resonate_project.engine import retention
from tests.engine.test_retention import DAY, LATER, present, settled_tree
from tests.support.factories import Api

WORKFLOWS_PER_S = 20  # issue #26: "a modest 20 workflows a second"
SECONDS = 5


def test_the_default_policy_keeps_up_with_twenty_workflows_a_second(
    api: Api, settings: Any
) -> None:
    settings.RESONATE = {"RETENTION_MS": DAY}  # the interval and batch left at their defaults
    retention._Progress.last_at = None
    retention._Progress.cursor = None
    retention._Progress.expired_at = None
    ids = [
        pid
        for i in range(WORKFLOWS_PER_S * SECONDS)
        for pid in settled_tree(api, f"w{i}")  # written over SECONDS at the rate
    ]

    for second in range(SECONDS):  # the runner's ticks over as long again, one a second
        retention.tick(LATER + second * 1_000)

    assert present(ids) == set()
