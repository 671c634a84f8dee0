"""Names a release moved keep working for one release, with a warning naming the new one."""

from __future__ import annotations

import importlib
import sys

import pytest


def test_the_beat_scheduler_under_its_old_name_is_the_same_class_with_a_warning() -> None:
    from resonate_project.runtime.beat import MetronomeScheduler

    sys.modules.pop("outbox.beat", None)
    with pytest.warns(DeprecationWarning, match=r"resonate_project\.runtime\.beat"):
        old = importlib.import_module("outbox.beat")
    assert old.MetronomeScheduler is MetronomeScheduler
