"""``GET /poll/{group}/{id}``: a worker's message stream (server-sent events).

The stream is a coroutine (``hub.Stream.frames``). Under Django's own ASGI handler each request
also holds a thread for its sync middleware until the response ends, i.e. one thread per open
stream; ``resonate_project.embed.asgi`` therefore runs this view through Django without that
per-request thread (see ``Resonate._stream`` there). A site that serves the URLs through its own
unwrapped ASGI application gets the same stream, at the cost of that thread.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse

from outbox.hub import Full, Opener, get_hub
from resonate_project.access.gate import PollGrant, acheck_poll
from resonate_project.core.wire.promises import ID_MAX_BYTES


async def poll(request: HttpRequest, group: str, stream_id: str) -> HttpResponseBase:
    grant = await acheck_poll(request, group)
    if isinstance(grant, HttpResponseBase):
        return grant
    if request.method != "GET":
        return JsonResponse({"error": "GET this URL as text/event-stream"}, status=405)
    for name, value in (("group", group), ("id", stream_id)):
        if len(value.encode()) > ID_MAX_BYTES:
            message = f"the stream's {name} must be at most {ID_MAX_BYTES} bytes of UTF-8"
            return JsonResponse({"error": message}, status=400)
    stream = get_hub().admit(group, stream_id, _opener(grant))
    if isinstance(stream, Full):
        return _full(stream)
    response = StreamingHttpResponse(stream.body(), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _opener(grant: PollGrant | None) -> Opener | None:
    if grant is None:
        return None
    return Opener(grant.owner, credential=grant.credential, expires_at=grant.expires_at)


def _full(full: Full) -> JsonResponse:
    if full.setting == "SSE_MAX_STREAMS":
        message = f"this server holds its maximum of {full.limit} streams (SSE_MAX_STREAMS); retry"
        return JsonResponse({"error": message}, status=503, headers={"Retry-After": "1"})
    message = (
        f"this credential holds its share of {full.limit} streams on this server "
        f"(SSE_MAX_STREAMS_PER_CREDENTIAL); close one, or retry"
    )
    return JsonResponse({"error": message}, status=429, headers={"Retry-After": "5"})
