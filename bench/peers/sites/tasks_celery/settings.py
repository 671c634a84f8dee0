"""Celery's site: the ``CELERY_`` settings, read from the environment the harness sets (a queue of
this run's own on the loopback Redis; the task reads its counter key there too)."""

import os

from tasks_common import *  # noqa: F403

INSTALLED_APPS = ["tasks_celery"]

CELERY_BROKER_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/7")
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("BENCH_QUEUE", "bench-tasks")
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False  # no pidbox keys shared with other Redis users
