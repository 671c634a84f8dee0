from typing import Any

from django.apps import AppConfig


def _metronome(sender: Any, **kwargs: Any) -> None:
    """Celery beat has created its scheduler (any Celery app: the project's or a host's)."""
    try:
        from resonate_project.runtime.beat import on_beat_init
    except ImportError as exc:  # django-celery-beat is the `celery` extra
        raise SystemExit(
            f"django-resonate: celery beat needs django-celery-beat ({exc}); install "
            '"django-resonate[celery]" and add "django_celery_beat" to INSTALLED_APPS'
        ) from exc
    on_beat_init(sender)


class OutboxConfig(AppConfig):
    name = "outbox"
    verbose_name = "Resonate outbox"

    def ready(self) -> None:
        from celery.signals import beat_init

        from resonate_project.embed import checks  # noqa: F401  (registers the system checks)

        # Here, not in the project's Celery module, so a host's own beat gets the same guard.
        beat_init.connect(_metronome, weak=False, dispatch_uid="resonate-metronome")
