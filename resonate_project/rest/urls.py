"""``/api/``: the resource API, its OpenAPI schema and Swagger UI.

Ids may contain ``/`` (hence ``path``); the action routes come first, so a promise whose id ends
in ``/settle`` (or a task's in ``/halt``, ``/continue``) is reachable only through ``POST /``.
"""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from resonate_project.rest import (
    outbox,
    schema,  # noqa: F401  (registers the bearer-token scheme)
    views,
)
from resonate_project.rest.docs import SwaggerView, swagger_asset

app_name = "resonate-api"

urlpatterns = [
    path("promises", views.PromiseList.as_view(), name="promises"),
    path("promises/<path:id>/settle", views.PromiseSettle.as_view(), name="promise-settle"),
    path("promises/<path:id>", views.PromiseDetail.as_view(), name="promise"),
    path("tasks", views.TaskList.as_view(), name="tasks"),
    path("tasks/<path:id>/halt", views.TaskHalt.as_view(), name="task-halt"),
    path("tasks/<path:id>/continue", views.TaskContinue.as_view(), name="task-continue"),
    path("tasks/<path:id>", views.TaskDetail.as_view(), name="task"),
    path("schedules", views.ScheduleList.as_view(), name="schedules"),
    path("schedules/<path:id>", views.ScheduleDetail.as_view(), name="schedule"),
    path("outbox", outbox.OutboxList.as_view(), name="outbox"),
    path("outbox/<path:key>/resend", outbox.OutboxResend.as_view(), name="outbox-resend"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SwaggerView.as_view(), name="docs"),
    path("docs/assets/<str:name>", swagger_asset, name="swagger-asset"),
]
