"""The ASGI application.

``POST /`` (the whole protocol) is answered here, before Django's request machinery: it uses no
session, CSRF, authentication or message middleware, and under ASGI each sync middleware hops to
Django's one shared sync thread, which serialises concurrent requests. Everything else (SSE
``/poll/``, the admin, ``/api/``, probes) goes to Django. Sites that embed the apps instead mount
``resonate_project.api.envelope`` as an ordinary view.
"""

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")

django_application = get_asgi_application()

from resonate_project.api import answer  # noqa: E402  (needs the app registry ready)

_JSON = [(b"content-type", b"application/json")]


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/":
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        status, body = await answer(b"".join(chunks))
        headers = [*_JSON, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await django_application(scope, receive, send)
