"""HTTP edges: the envelope endpoint ``POST /``, health and readiness probes, and 410 for the
legacy REST paths. The clock is read here, once per request."""

from __future__ import annotations

from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from promises.clock import now_ms

from .envelope import handle_body


@csrf_exempt
def envelope(request: HttpRequest) -> HttpResponse:
    if request.method != "POST":
        return JsonResponse({"error": "POST a {kind, head, data} envelope to this URL"}, status=405)
    status, body = handle_body(request.body, now_ms())
    return HttpResponse(body, status=status, content_type="application/json")


def health(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok"})


def ready(request: HttpRequest) -> HttpResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        return JsonResponse({"status": "unavailable", "error": str(exc)}, status=503)
    return JsonResponse({"status": "ready"})


@csrf_exempt
def gone(request: HttpRequest, rest: str = "") -> HttpResponse:
    return JsonResponse(
        {"error": "This endpoint is no longer supported. Please update to the latest SDK."},
        status=410,
    )
