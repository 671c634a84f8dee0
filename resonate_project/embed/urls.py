"""The routes a host site includes: ``path("resonate/", include("resonate_project.embed.urls"))``.

At the prefix itself ``POST`` takes the protocol's envelopes (``POST /resonate/``), ``poll/<group>/
<id>`` is a worker's SSE stream, and ``api/`` the resource API with ``api/schema/`` and
``api/docs/``. Any prefix works, the site root (``""``) included. No admin: the models register
on the host's own admin site (each app's ``admin.py``)."""

from django.urls import include, path

from outbox.views import poll
from resonate_project.edges import api

urlpatterns = [
    path("", api.envelope, name="resonate-envelope"),
    path("poll/<str:group>/<str:stream_id>", poll, name="resonate-poll"),
    path("api/", include("resonate_project.edges.rest.urls")),
]
