"""Embedding the apps in an existing Django site (docs/how-to/embedding.md).

``RESONATE_APPS`` is what a host adds to ``INSTALLED_APPS``; ``resonate_project.embed.urls``
mounts the protocol and the resource API under a prefix; ``resonate_project.embed.asgi.wrap``
serves them without Django's middleware hop and, with no Celery broker, runs the internal steps
and HTTP push in the web process. This module imports nothing, so a settings file may import it.
"""

RESONATE_APPS = [
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "promises",
    "tasks_app",
    "schedules",
    "outbox",
    "resonate_project.access",
]
