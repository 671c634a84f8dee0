"""The standalone server's ASGI application: the whole site wrapped by
``resonate_project.embed.asgi.wrap`` (``POST /`` and SSE before Django's middleware). ``manage.py
serve`` starts the internal steps and push itself when no broker is set (``outbox.embedded``)."""

import os

from django.core.asgi import get_asgi_application

from resonate_project.observability import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resonate_project.settings")

tracing.configure()  # before the handler is built: it instruments Django's middleware
django_application = get_asgi_application()

from resonate_project.embed.asgi import wrap  # noqa: E402  (needs the app registry ready)

application = wrap(django_application, steps=False)
