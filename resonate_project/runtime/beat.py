"""Celery beat's scheduler for the metronome.

django-celery-beat stores intervals as whole numbers and drops ``expires`` when it converts
``beat_schedule``; so the two periodic tasks are installed here as ``PeriodicTask`` rows with a
microsecond interval and ``expire_seconds`` (a late tick is dropped, not run late). Protocol
schedules are never beat entries: they are rows swept by ``resonate.tick``.

The project's ``CELERY_BEAT_SCHEDULER`` is :class:`MetronomeScheduler`, but an operator's
``celery beat -S ...`` overrides it. So the rows are also installed when beat starts with any
database scheduler (:func:`on_beat_init`, connected in ``outbox.apps``), and beat
refuses to start with a scheduler that cannot read them: without the metronome no timer,
timeout, retry or schedule would ever fire.
"""

from __future__ import annotations

import math
import time
from typing import Any

from django.db import OperationalError, connection
from django_celery_beat.models import IntervalSchedule, PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from resonate_project.core.conf import resonate_settings

DRAIN_EVERY_MS = 1000
# How long beat waits at start for an unreachable database before it gives up and exits.
STARTUP_WAIT_S = 60.0


def install_metronome() -> None:
    entries = [
        ("resonate-tick", "resonate.tick", resonate_settings().TICK_INTERVAL_MS),
        ("resonate-drain", "resonate.drain", DRAIN_EVERY_MS),
    ]
    for name, task, every_ms in entries:
        interval, _ = IntervalSchedule.objects.get_or_create(
            every=every_ms * 1000, period=IntervalSchedule.MICROSECONDS
        )
        PeriodicTask.objects.update_or_create(
            name=name,
            defaults={
                "task": task,
                "interval": interval,
                "crontab": None,
                "expires": None,
                "expire_seconds": max(1, math.ceil(every_ms / 1000)),
                "enabled": True,
                "one_off": False,
            },
        )


class MetronomeScheduler(DatabaseScheduler):
    def setup_schedule(self) -> None:
        # A database restarting or failing over while beat starts (make chaos-failover's primary
        # SIGKILL met a beat still starting): wait for it, bounded, instead of exiting, which
        # would leave every timer unfired until someone restarted beat.
        deadline = time.monotonic() + STARTUP_WAIT_S
        while True:
            try:
                install_metronome()
                super().setup_schedule()
                return
            except OperationalError:
                if time.monotonic() > deadline:
                    raise
                connection.close()  # the next attempt connects afresh
                time.sleep(1.0)


def on_beat_init(service: Any) -> None:
    """Beat has created its scheduler: make sure it will send the metronome's ticks."""
    scheduler = service.scheduler
    if isinstance(scheduler, MetronomeScheduler):
        return
    if isinstance(scheduler, DatabaseScheduler):
        install_metronome()  # its change signal makes the running scheduler reload the rows
        return
    kind = f"{type(scheduler).__module__}:{type(scheduler).__name__}"
    raise SystemExit(
        f"django-resonate: celery beat was started with the scheduler {kind}, which never sends "
        "resonate.tick, so no timer, timeout, retry or schedule would fire. Start beat without "
        "-S (the project sets resonate_project.runtime.beat:MetronomeScheduler), or with "
        "-S resonate_project.runtime.beat:MetronomeScheduler or "
        "-S django_celery_beat.schedulers:DatabaseScheduler."
    )
