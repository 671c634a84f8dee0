"""``GET /`` for a browser: a short page saying what this server is, with links to the routes
this configuration has (the admin, the API docs, health and metrics). Every other client keeps
the envelope endpoint's JSON answer (``resonate_project.edges.api.envelope``)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join

from resonate_project.core.conf import resonate_settings

# (URL name, label, what it is), in the page's order; a name this site's URLconf lacks (a host
# that mounts the protocol without the admin, say) is left out.
LINKS = [
    ("admin:index", "Admin", "promises, tasks, schedules and the outbox (staff sign-in)"),
    ("resonate-overview", "Overview", "the operator's summary: backlog, failures, streams"),
    ("resonate-api:docs", "API docs", "the resource API under /api/ (Swagger UI)"),
    ("resonate-health", "Health", "liveness probe"),
    ("resonate-ready", "Ready", "readiness probe (checks the database)"),
    ("resonate-metrics", "Metrics", "Prometheus text format"),
]

STYLE = (
    "body{font:16px/1.5 system-ui,sans-serif;max-width:44rem;margin:3rem auto;padding:0 1rem;"
    "color:#222}code{background:#f2f2f2;padding:0 .25em}li{margin:.4em 0}"
)


def wants_html(request: HttpRequest) -> bool:
    """``text/html`` named in Accept (a browser), not ranked below JSON; ``*/*`` alone (curl,
    the SDKs) is not enough."""
    html = json = 0.0
    for accepted in request.accepted_types:
        kind = (accepted.main_type, accepted.sub_type)
        if kind == ("text", "html"):
            html = max(html, accepted.quality)
        elif kind == ("application", "json"):
            json = max(json, accepted.quality)
    return html > 0 and html >= json


def links() -> list[tuple[str, str, str]]:
    found = []
    for name, label, what in LINKS:
        if name == "resonate-metrics" and not resonate_settings().METRICS:
            continue
        try:
            found.append((reverse(name), label, what))
        except NoReverseMatch:
            continue
    return found


def home_page(request: HttpRequest) -> HttpResponse:
    items = format_html_join("\n", '<li><a href="{}">{}</a>: {}</li>', links())
    body = format_html(
        """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>django-resonate</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{}</style></head>
<body><h1>django-resonate</h1>
<p>A <a href="https://www.resonatehq.io/">Resonate</a> durable-execution server. The SDKs and
<code>manage.py resonate --server</code> send their requests here: <code>POST {}</code> with a
<code>{{kind, head, data}}</code> envelope; workers stream from
<code>{}poll/&lt;group&gt;/&lt;id&gt;</code>.</p>
<ul>
{}
</ul></body></html>
""",
        STYLE,
        request.path,
        request.path,
        items,
    )
    return HttpResponse(body, content_type="text/html; charset=utf-8")
