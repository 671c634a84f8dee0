"""The standalone server's project package. Importing it (or the apps) makes no Celery app
current: ``celery -A resonate_project`` finds ``resonate_project.celery.app`` by itself, and a
host's own app stays the current one (docs/how-to/embedding.md#with-celery)."""

# The release, in this one place: pyproject.toml reads it (``dynamic = ["version"]``), and the
# OpenAPI schema, ``/health``, ``manage.py resonate --version``, the outbound User-Agent and the
# documentation site print it.
__version__ = "0.1.0"
# Sent by the HTTP push and by ``manage.py resonate --server``.
USER_AGENT = f"django-resonate/{__version__}"
