"""The no-op task."""

from django.tasks import task


@task()
def noop() -> int:
    return 1
