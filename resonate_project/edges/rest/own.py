"""The DRF settings the resource API's views carry themselves.

A host site has its own ``REST_FRAMEWORK`` (renderers, exception handler, schema class,
versioning, throttles, default permissions) and its own ``SPECTACULAR_SETTINGS``; neither may
change how ``/api/`` answers, and these views change neither. Everything DRF would read from
those settings is fixed here, per view.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework.authentication import SessionAuthentication
from rest_framework.metadata import SimpleMetadata
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer

from resonate_project import __version__
from resonate_project.edges.rest.auth import ApiAccess, BearerTokenAuthentication
from resonate_project.edges.rest.errors import exception_handler
from resonate_project.edges.rest.parsers import DepthLimitedJSONParser

# drf-spectacular's settings for /api/schema/ and /api/docs/, applied per request.
SCHEMA_SETTINGS: dict[str, Any] = {
    "TITLE": "django-resonate",
    "VERSION": __version__,
    "PREPROCESSING_HOOKS": ["resonate_project.edges.rest.schema.only_resonate"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "resonate_project.edges.rest.schema.document_envelope",
    ],
}


class ResourceSchema(AutoSchema):
    """drf-spectacular's ``AutoSchema``, describing an operation by its own text only: the one
    given to ``documented``, the method's docstring, or the view class's own. drf-spectacular
    falls back on the bases' docstrings, and OwnSettings' described every GET without one."""

    def get_description(self) -> str:
        method = getattr(self.view, getattr(self.view, "action", self.method.lower()), None)
        own = getattr(method, "__doc__", None) or type(self.view).__dict__.get("__doc__")
        return inspect.cleandoc(own) if own else ""


def documented(**kwargs: Any) -> Callable[[Any], Any]:
    """``extend_schema`` on ``ResourceSchema`` whatever the site's ``DEFAULT_SCHEMA_CLASS`` (on
    a method, ``extend_schema`` subclasses that setting's class)."""

    def decorate(method: Any) -> Any:
        method.schema = ResourceSchema
        return extend_schema(**kwargs)(method)

    return decorate


class OwnSettings:
    """Mixed into every API view before DRF's own classes."""

    authentication_classes: list[type] = [BearerTokenAuthentication, SessionAuthentication]
    permission_classes: list[type] = [ApiAccess]
    parser_classes: list[type] = [DepthLimitedJSONParser]
    renderer_classes: list[type] = [JSONRenderer]
    throttle_classes: list[type] = []
    versioning_class = None
    content_negotiation_class = DefaultContentNegotiation
    metadata_class = SimpleMetadata
    schema = ResourceSchema()

    def get_exception_handler(self) -> Callable[..., Any]:
        return exception_handler
