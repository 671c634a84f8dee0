from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "outbox"
    verbose_name = "Resonate outbox"

    def ready(self) -> None:
        from resonate_project.embed import checks  # noqa: F401  (registers the system checks)
