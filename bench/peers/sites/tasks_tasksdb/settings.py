"""django-tasks-db's site: its app and its backend as the default, one queue."""

from tasks_common import *  # noqa: F403

INSTALLED_APPS = ["django_tasks_db"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}}
