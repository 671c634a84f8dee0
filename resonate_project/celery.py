"""The Celery application: a worker drains the outbox, beat is the metronome for internal steps."""

import os
from typing import Any

from celery import Celery
from celery.signals import beat_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")

app = Celery("resonate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@beat_init.connect
def _metronome(sender: Any, **kwargs: Any) -> None:
    # Imported here: models can be imported only once beat has set Django up.
    from outbox.beat import on_beat_init

    on_beat_init(sender)
