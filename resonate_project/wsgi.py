"""The site as a WSGI application (``runserver``, or a WSGI server), its request bodies held to
``MAX_BODY_BYTES`` as under ASGI (``embed.asgi.bounded``): a declared ``Content-Length`` over the
limit is answered 413 before Django reads anything. Django's WSGI request reads at most the
declared length, and nothing of a body without one (chunked), so the declared length is the
whole of what it can read; ``request.body`` alone would be capped by
``DATA_UPLOAD_MAX_MEMORY_SIZE``, but the resource API's parser and multipart files are not."""

import os
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from django.core.wsgi import get_wsgi_application

from resonate_project.core.conf import resonate_settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")
django_application = get_wsgi_application()

from resonate_project.edges.rest.errors import body_too_large  # noqa: E402  (needs the app registry)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def bounded(app: WSGIApp) -> WSGIApp:
    def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        limit = resonate_settings().MAX_BODY_BYTES
        declared = str(environ.get("CONTENT_LENGTH") or "")
        if declared.isdigit() and int(declared) > limit:
            status, body = body_too_large(limit)
            headers = [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
            start_response(f"{status} {HTTPStatus(status).phrase}", headers)
            return [body]
        return app(environ, start_response)

    return application


application = bounded(django_application)
