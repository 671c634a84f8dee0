from django.contrib import admin
from django.urls import path, re_path

from outbox.views import poll

from . import api

urlpatterns = [
    path("", api.envelope, name="resonate-envelope"),
    path("poll/<str:group>/<str:stream_id>", poll, name="resonate-poll"),
    path("health", api.health, name="resonate-health"),
    path("ready", api.ready, name="resonate-ready"),
    re_path(r"^(?:promises|tasks|schedules)(?P<rest>/.*)?$", api.gone, name="resonate-legacy"),
    path("admin/", admin.site.urls),
]
