"""Whether background steps are paused by ``debug.start`` (only ever true with RESONATE DEBUG)."""

from __future__ import annotations

from promises.models import DebugState
from resonate_project.core.conf import resonate_settings


def paused() -> bool:
    if not resonate_settings().DEBUG:
        return False
    return DebugState.objects.filter(id=1, paused=True).exists()


def set_paused(value: bool) -> None:
    DebugState.objects.update_or_create(id=1, defaults={"paused": value})
