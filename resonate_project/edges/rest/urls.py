"""``/api/``: the resource API, its OpenAPI schema and Swagger UI. Collection and action URLs
answer with and without a trailing slash.

Ids may contain ``/`` (hence ``path``); the action routes come first, so a promise whose id ends
in ``/settle`` (or a task's in ``/halt``, ``/continue``) is reachable only through ``POST /``.
"""

from django.urls import URLPattern, path
from rest_framework.views import APIView

from resonate_project.edges.rest import (
    djtasks,
    outbox,
    schema,  # noqa: F401  (registers the bearer-token scheme)
    views,
)
from resonate_project.edges.rest.docs import SchemaView, SwaggerView, swagger_asset

app_name = "resonate-api"


def both(route: str, view: type[APIView], name: str) -> list[URLPattern]:
    """The route as documented, and with DRF's usual trailing slash as an alias that no schema
    lists (``schema = None``). A detail URL with a trailing slash is the id with one: ids may end
    in ``/``."""
    alias: type[APIView] = type(view.__name__, (view,), {"schema": None})
    return [
        path(route, view.as_view(), name=name),
        path(f"{route}/", alias.as_view(), name=f"{name}-slash"),
    ]


urlpatterns = [
    *both("promises", views.PromiseList, "promises"),
    *both("promises/<path:id>/settle", views.PromiseSettle, "promise-settle"),
    path("promises/<path:id>", views.PromiseDetail.as_view(), name="promise"),
    *both("tasks", views.TaskList, "tasks"),
    *both("tasks/<path:id>/halt", views.TaskHalt, "task-halt"),
    *both("tasks/<path:id>/continue", views.TaskContinue, "task-continue"),
    path("tasks/<path:id>", views.TaskDetail.as_view(), name="task"),
    *both("schedules", views.ScheduleList, "schedules"),
    path("schedules/<path:id>", views.ScheduleDetail.as_view(), name="schedule"),
    *both("django-tasks", djtasks.JobList, "django-tasks"),
    *both("django-tasks/<path:id>/cancel", djtasks.JobCancel, "django-task-cancel"),
    *both("django-tasks/<path:id>/rerun", djtasks.JobRerun, "django-task-rerun"),
    path("django-tasks/<path:id>", djtasks.JobDetail.as_view(), name="django-task"),
    *both("outbox", outbox.OutboxList, "outbox"),
    *both("outbox/<path:key>/resend", outbox.OutboxResend, "outbox-resend"),
    *both("outbox/<path:key>/purge", outbox.OutboxPurge, "outbox-purge"),
    path("schema/", SchemaView.as_view(), name="schema"),
    path("docs/", SwaggerView.as_view(), name="docs"),
    path("docs/assets/<str:name>", swagger_asset, name="swagger-asset"),
]
