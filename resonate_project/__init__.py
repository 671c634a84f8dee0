"""The standalone server's project package. Importing it (or the apps) makes no Celery app
current: ``celery -A resonate_project`` finds ``resonate_project.celery.app`` by itself, and a
host's own app stays the current one (README "Embedding")."""
