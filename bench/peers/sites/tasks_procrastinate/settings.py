"""Procrastinate's site: ``procrastinate.contrib.django`` and this app, nothing else."""

from tasks_common import *  # noqa: F403

INSTALLED_APPS = ["procrastinate.contrib.django", "tasks_procrastinate"]
