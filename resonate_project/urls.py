from django.contrib import admin
from django.urls import include, path, re_path

from resonate_project.edges import api
from resonate_project.edges.admin.dashboard import overview
from resonate_project.observability.export import metrics_view

# The standalone server: what a host includes (the envelope at /, /poll/, /api/), plus probes,
# metrics and the admin.
urlpatterns = [
    path("", include("resonate_project.embed.urls")),
    path("health", api.health, name="resonate-health"),
    path("ready", api.ready, name="resonate-ready"),
    path("metrics", metrics_view, name="resonate-metrics"),
    re_path(r"^(?:promises|tasks|schedules)(?P<rest>/.*)?$", api.gone, name="resonate-legacy"),
    path("admin/overview/", admin.site.admin_view(overview), name="resonate-overview"),
    path("admin/", admin.site.urls),
]

# Unrouted paths under /api/ answer in the resource API's error shape; others as Django does.
handler404 = "resonate_project.edges.rest.errors.page_not_found"
handler500 = "resonate_project.edges.rest.errors.server_error"
