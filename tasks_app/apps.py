from django.apps import AppConfig


class TasksAppConfig(AppConfig):
    name = "tasks_app"
    label = "tasks_app"
    verbose_name = "Resonate tasks"
