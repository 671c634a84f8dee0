"""A host's URLconf and ASGI application for tests/embedding/test_embed.py: the apps mounted under
``/resonate/`` beside a view of the host's own."""

from django.contrib import admin
from django.core.asgi import get_asgi_application
from django.http import HttpRequest, HttpResponse
from django.urls import include, path

from resonate_project.embed.asgi import wrap


def home(request: HttpRequest) -> HttpResponse:
    return HttpResponse("the host's own page")


urlpatterns = [
    path("", home),
    path("resonate/", include("resonate_project.embed.urls")),
    path("admin/", admin.site.urls),
]

application = wrap(get_asgi_application())
