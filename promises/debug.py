"""Whether background steps are paused by ``debug.start`` (only ever true with RESONATE DEBUG)."""

from __future__ import annotations

from .conf import resonate_settings
from .models import DebugState


def paused() -> bool:
    if not resonate_settings().DEBUG:
        return False
    return DebugState.objects.filter(id=1, paused=True).exists()


def set_paused(value: bool) -> None:
    DebugState.objects.update_or_create(id=1, defaults={"paused": value})
