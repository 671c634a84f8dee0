from django.apps import AppConfig


class PromisesConfig(AppConfig):
    name = "promises"
    verbose_name = "Resonate promises"

    def ready(self) -> None:
        from promises import checks  # noqa: F401  (registers the system checks)
