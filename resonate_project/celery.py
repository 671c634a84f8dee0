"""The Celery application: a worker drains the outbox, beat is the metronome for internal steps."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")

app = Celery("resonate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _beat_schedule() -> dict[str, dict[str, object]]:
    """Beat is a metronome: timeouts, leases, retries and schedules stay rows in our tables and
    are found by ``resonate.tick``; ``resonate.drain`` catches messages whose wake-up was lost.
    A tick older than its interval is dropped rather than run late."""
    from promises.conf import resonate_settings

    every = resonate_settings().TICK_INTERVAL_MS / 1000
    return {
        "resonate-tick": {
            "task": "resonate.tick",
            "schedule": every,
            "options": {"expires": every},
        },
        "resonate-drain": {"task": "resonate.drain", "schedule": 1.0, "options": {"expires": 1.0}},
    }


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **kwargs: object) -> None:
    sender.conf.beat_schedule = _beat_schedule()
