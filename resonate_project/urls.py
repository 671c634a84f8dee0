from django.contrib import admin
from django.urls import path, re_path

from . import api

urlpatterns = [
    path("", api.envelope, name="resonate-envelope"),
    path("health", api.health, name="resonate-health"),
    path("ready", api.ready, name="resonate-ready"),
    re_path(r"^(?:promises|tasks|schedules)(?P<rest>/.*)?$", api.gone, name="resonate-legacy"),
    path("admin/", admin.site.urls),
]
