"""HTTP edges: the envelope endpoint ``POST /``, health and readiness probes, and 410 for the
legacy REST paths. The clock is read here, once per request."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import sync_to_async
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from promises.clock import now_ms
from promises.conf import resonate_settings

from .envelope import handle_body

# Handlers are synchronous (one transaction each). Under ASGI, Django runs every sync view on one
# shared thread per process; the envelope runs on its own pool instead (WEB_THREADS), so requests
# wait on the database in parallel, each thread with its own persistent connection. WEB_THREADS=0
# keeps Django's shared thread (the in-process test suite, whose transaction lives there).
_pool: ThreadPoolExecutor | None = None


def _handle(body: bytes, clock_ms: int) -> tuple[int, bytes]:
    # Request signals (which close stale connections) run on Django's own thread, not this one:
    # drop a connection that failed or outlived CONN_MAX_AGE before using it.
    connection.close_if_unusable_or_obsolete()
    return handle_body(body, clock_ms)


def _runner() -> Callable[[bytes, int], Awaitable[tuple[int, bytes]]]:
    global _pool
    threads = resonate_settings().WEB_THREADS
    if threads <= 0:
        return sync_to_async(handle_body, thread_sensitive=True)
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="resonate-envelope")
    return sync_to_async(_handle, thread_sensitive=False, executor=_pool)


async def answer(body: bytes) -> tuple[int, bytes]:
    """One envelope in, one out, off the event loop; the clock is read here."""
    return await _runner()(body, now_ms())


@csrf_exempt
async def envelope(request: HttpRequest) -> HttpResponse:
    """``POST /`` as a Django view (for sites that mount the URLs; ``resonate_project.asgi``
    answers it before Django's middleware when this project is the server)."""
    if request.method != "POST":
        return JsonResponse({"error": "POST a {kind, head, data} envelope to this URL"}, status=405)
    status, body = await answer(request.body)
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
