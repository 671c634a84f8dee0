"""django-celery-beat's models are not in the standalone server's admin (issue #25, part 4): its
"Periodic tasks" are the metronome's rows, never the protocol's schedules, and an Add link there
made a schedule that would never run. A host that embeds the apps keeps them in its own admin."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client
from django_celery_beat.models import ClockedSchedule, CrontabSchedule, PeriodicTask

ROOT = Path(__file__).resolve().parents[2]


def test_the_standalone_admin_shows_no_periodic_tasks(client: Client, db: Any) -> None:
    User.objects.create_superuser("ops", "ops@example.com", "pw")
    client.login(username="ops", password="pw")
    index = client.get("/admin/")
    assert index.status_code == 200
    page = index.content.decode()
    assert "Periodic tasks" not in page
    assert "Crontabs" not in page
    assert "Schedules" in page  # the protocol's own schedules stay
    assert client.get("/admin/django_celery_beat/periodictask/").status_code == 404
    assert client.get("/admin/django_celery_beat/periodictask/add/").status_code == 404
    for model in (PeriodicTask, CrontabSchedule, ClockedSchedule):
        assert not admin.site.is_registered(model)


def test_a_host_admin_keeps_django_celery_beats_models(tmp_path: Path) -> None:
    """A host's settings with Django's own admin, django-celery-beat and the apps: nothing the
    apps import unregisters beat's models."""
    (tmp_path / "host_settings.py").write_text(
        textwrap.dedent(
            f"""
            from resonate_project.embed import RESONATE_APPS
            SECRET_KEY = "host"
            INSTALLED_APPS = [
                "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                "django.contrib.sessions", "django.contrib.messages",
                "django_celery_beat", *RESONATE_APPS,
            ]
            DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3",
                                       "NAME": {str(tmp_path / "host.sqlite3")!r}}}}}
            USE_TZ = True
            """
        )
    )
    probe = textwrap.dedent(
        """
        import django
        django.setup()
        from django.contrib import admin
        from django_celery_beat.models import PeriodicTask
        from promises.models import Promise
        print(admin.site.is_registered(PeriodicTask), admin.site.is_registered(Promise))
        """
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "host_settings"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True"]
