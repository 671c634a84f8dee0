"""``GET /poll/{group}/{id}``: a worker's message stream (server-sent events)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from django.http import HttpRequest, HttpResponseBase, JsonResponse, StreamingHttpResponse

from promises.conf import resonate_settings

from .hub import Stream, get_hub


async def poll(request: HttpRequest, group: str, stream_id: str) -> HttpResponseBase:
    if request.method != "GET":
        return JsonResponse({"error": "GET this URL as text/event-stream"}, status=405)
    hub = get_hub()
    stream = hub.connect(group, stream_id)
    response = StreamingHttpResponse(_events(stream), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _events(stream: Stream) -> AsyncIterator[bytes]:
    hub = get_hub()
    keepalive = resonate_settings().SSE_KEEPALIVE_MS / 1000
    try:
        yield b": connected\n\n"
        while True:
            try:
                item = await asyncio.wait_for(stream.queue.get(), keepalive)
            except TimeoutError:
                yield b": keepalive\n\n"
                continue
            stream.sending = item
            yield b"data: " + item.body + b"\n\n"
            stream.sending = None
            hub.ack(item)
    finally:
        hub.disconnect(stream)
