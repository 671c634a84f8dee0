from django.contrib import admin
from django.urls import include, path, re_path

from outbox.dashboard import overview
from outbox.views import poll
from resonate_project import api
from resonate_project.observability.export import metrics_view

urlpatterns = [
    path("", api.envelope, name="resonate-envelope"),
    path("poll/<str:group>/<str:stream_id>", poll, name="resonate-poll"),
    path("health", api.health, name="resonate-health"),
    path("ready", api.ready, name="resonate-ready"),
    path("metrics", metrics_view, name="resonate-metrics"),
    re_path(r"^(?:promises|tasks|schedules)(?P<rest>/.*)?$", api.gone, name="resonate-legacy"),
    path("api/", include("resonate_project.rest.urls")),
    path("admin/overview/", admin.site.admin_view(overview), name="resonate-overview"),
    path("admin/", admin.site.urls),
]

# Unrouted paths under /api/ answer in the resource API's error shape; others as Django does.
handler404 = "resonate_project.rest.errors.page_not_found"
handler500 = "resonate_project.rest.errors.server_error"
