from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "resonate_project.access"
    label = "access"
    verbose_name = "Access"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from resonate_project.access import checks  # noqa: F401  (registers the system checks)
