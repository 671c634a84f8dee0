"""The Celery application, as Celery's "First steps with Django" lays it out."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tasks_celery.settings")

app = Celery("tasks_celery")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["tasks_celery"])
