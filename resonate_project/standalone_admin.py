"""The standalone server's admin app: Django's own, less django-celery-beat's models.

Celery beat's ``PeriodicTask`` rows here are only the metronome
(``resonate_project/runtime/beat.py`` installs ``resonate.tick`` and ``resonate.drain`` itself); the
protocol's schedules are rows of their own (``schedules``), so "Periodic tasks" with its Add links
offered operators a schedule that would never run. ``resonate_project/settings.py`` installs this
config in place of ``django.contrib.admin``; a host that embeds the apps keeps its own admin as it
is.
"""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.contrib.admin.apps import AdminConfig


class StandaloneAdminConfig(AdminConfig):
    def ready(self) -> None:
        super().ready()  # autodiscover: every app's admin module registers its models
        if not apps.is_installed("django_celery_beat"):
            return
        for model in apps.get_app_config("django_celery_beat").get_models():
            if admin.site.is_registered(model):
                admin.site.unregister(model)
