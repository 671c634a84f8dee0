"""The Celery application: a worker drains the outbox, beat is the metronome for internal steps."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")

app = Celery("resonate")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
