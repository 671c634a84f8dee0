"""Deprecated: the beat scheduler moved to ``resonate_project.runtime.beat``. This name keeps
``celery beat -S outbox.beat:MetronomeScheduler`` working for one release."""

import warnings

from resonate_project.runtime.beat import MetronomeScheduler

warnings.warn(
    "outbox.beat is deprecated: use resonate_project.runtime.beat:MetronomeScheduler",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["MetronomeScheduler"]
