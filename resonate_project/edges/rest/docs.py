"""The OpenAPI schema, and Swagger UI that works offline: its assets come from the
``drf-spectacular-sidecar`` package and are served by this view, so neither a CDN nor static-file
serving is needed. Both carry their own DRF and drf-spectacular settings (``rest.own``)."""

from __future__ import annotations

from pathlib import Path

import drf_spectacular_sidecar
from django.http import FileResponse, Http404, HttpRequest
from django.urls import reverse
from drf_spectacular.settings import patched_settings
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.renderers import TemplateHTMLRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from resonate_project.edges.rest.own import SCHEMA_SETTINGS, OwnSettings, documented

DIST = (
    Path(drf_spectacular_sidecar.__file__).parent / "static/drf_spectacular_sidecar/swagger-ui-dist"
)
ASSETS = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui-standalone-preset.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}


def swagger_asset(request: HttpRequest, name: str) -> FileResponse:
    if name not in ASSETS:
        raise Http404(name)
    response = FileResponse((DIST / name).open("rb"), content_type=ASSETS[name])
    response["Cache-Control"] = "public, max-age=86400"
    return response


class SchemaView(OwnSettings, SpectacularAPIView):
    renderer_classes = SpectacularAPIView.renderer_classes  # type: ignore[assignment]
    custom_settings = SCHEMA_SETTINGS

    @documented(exclude=True)
    def get(self, request: Request, *args: object, **kwargs: object) -> Response:
        return super().get(request, *args, **kwargs)


class SwaggerView(OwnSettings, SpectacularSwaggerView):
    renderer_classes = [TemplateHTMLRenderer]
    metadata_class = None  # OPTIONS: 405 (DRF's metadata has no HTML template: it was a 500)
    url_name = "resonate-api:schema"
    title = SCHEMA_SETTINGS["TITLE"]

    @documented(exclude=True)
    def get(self, request: Request, *args: object, **kwargs: object) -> Response:
        with patched_settings(SCHEMA_SETTINGS):
            return super().get(request, *args, **kwargs)

    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return reverse("resonate-api:swagger-asset", args=[filename])

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return reverse("resonate-api:swagger-asset", args=["favicon-32x32.png"])
