"""Celery on the Redis broker, configured from a Django site's settings (Celery's own Django
layout: the app is loaded with the package, so ``shared_task`` binds to it): no result backend;
each task counts itself with one ``INCR`` on a Redis key the harness reads."""

from .app import app as celery_app

__all__ = ["celery_app"]
