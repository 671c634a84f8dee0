"""The SSE hub of one web process: its connected streams, and the thread that delivers their
``poll://`` messages.

The hub thread leases the rows addressed to streams this process holds (``delivery.claim``),
routes each to a stream's queue on the event loop, and deletes a row only after its frame was
handed to the server (the stream acknowledges after the ``yield``). A message whose stream is not
connected anywhere stays in the outbox until one connects; a stream that goes away releases what
it had not sent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import threading
import uuid
from dataclasses import dataclass, field
from functools import reduce
from operator import or_

from django.db import close_old_connections
from django.db.models import Q

from promises.clock import now_ms
from promises.conf import resonate_settings

from . import delivery, notify
from .delivery import Claimed, parse_poll
from .models import Subscriber

log = logging.getLogger("resonate.hub")

PROCESS = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(eq=False)
class Stream:
    group: str
    id: str
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[Claimed] = field(default_factory=asyncio.Queue)
    sending: Claimed | None = None


class Hub:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[tuple[str, str], list[Stream]] = {}
        self._acks: list[Claimed] = []
        self._releases: list[Claimed] = []
        self._gone: set[tuple[str, str]] = set()
        self._new: set[tuple[str, str]] = set()
        self._refreshed_at = 0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # --- event-loop side (no database access here) ---------------------------------------------

    def connect(self, group: str, stream_id: str) -> Stream:
        stream = Stream(group, stream_id, asyncio.get_running_loop())
        with self._lock:
            self._streams.setdefault((group, stream_id), []).append(stream)
            self._gone.discard((group, stream_id))
            self._new.add((group, stream_id))
            self._start()
        self._wake.set()
        return stream

    def disconnect(self, stream: Stream) -> None:
        unsent = [stream.sending] if stream.sending is not None else []
        while not stream.queue.empty():
            unsent.append(stream.queue.get_nowait())
        key = (stream.group, stream.id)
        with self._lock:
            streams = self._streams.get(key, [])
            if stream in streams:
                streams.remove(stream)
            if not streams:
                self._streams.pop(key, None)
                self._gone.add(key)
            self._releases.extend(unsent)
        self._wake.set()

    def ack(self, item: Claimed) -> None:
        with self._lock:
            self._acks.append(item)
        self._wake.set()

    def wake(self, push: bool = False) -> None:
        self._wake.set()

    # --- hub thread ------------------------------------------------------------------------------

    def _start(self) -> None:
        if self._thread is None:
            notify.subscribe(self.wake)
            notify.listen(self.wake)
            self._thread = threading.Thread(target=self._run, name="resonate-hub", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        conf = resonate_settings()
        while True:
            self._wake.wait(conf.POLL_FALLBACK_MS / 1000)
            self._wake.clear()
            try:
                close_old_connections()
                self._flush()
                self._deliver()
            except Exception:
                log.exception("SSE delivery failed; retrying")
                self._wake.wait(0.5)

    def _flush(self) -> None:
        with self._lock:
            acks, self._acks = self._acks, []
            releases, self._releases = self._releases, []
            gone, self._gone = self._gone, set()
            new, self._new = self._new, set()
        delivery.ack(acks)
        now = now_ms()
        delivery.release(releases, now)
        for group, stream_id in gone:
            Subscriber.objects.filter(group=group, stream_id=stream_id, process=PROCESS).delete()
        # The registry is refreshed on connect and then once per fallback interval, not on every
        # wake-up (a wake-up follows every commit that wrote a message).
        if now - self._refreshed_at >= resonate_settings().POLL_FALLBACK_MS:
            self._refreshed_at = now
            Subscriber.objects.filter(process=PROCESS).update(seen_at=now)
        for group, stream_id in new:
            Subscriber.objects.update_or_create(
                group=group, stream_id=stream_id, process=PROCESS, defaults={"seen_at": now}
            )

    def _snapshot(self) -> dict[tuple[str, str], list[Stream]]:
        with self._lock:
            return {key: list(streams) for key, streams in self._streams.items() if streams}

    def _deliver(self) -> None:
        batch = resonate_settings().DRAIN_BATCH
        while True:
            snapshot = self._snapshot()
            if not snapshot:
                return
            items = delivery.claim(_addresses(snapshot), now_ms(), batch)
            unroutable = []
            for item in items:
                stream = self._route(item, snapshot)
                if stream is None:
                    unroutable.append(item)
                else:
                    stream.loop.call_soon_threadsafe(stream.queue.put_nowait, item)
            delivery.release(unroutable, now_ms())
            if len(items) < batch:
                return

    def _route(self, item: Claimed, snapshot: dict[tuple[str, str], list[Stream]]) -> Stream | None:
        address = parse_poll(item.address)
        if address is None:
            return None
        if address.id is not None and (address.group, address.id) in snapshot:
            return random.choice(snapshot[(address.group, address.id)])
        if address.mode == "uni":
            return None
        if address.id is not None and _connected_elsewhere(address.group, address.id):
            return None
        group = [s for (g, _), streams in snapshot.items() if g == address.group for s in streams]
        return random.choice(group) if group else None


def _addresses(snapshot: dict[tuple[str, str], list[Stream]]) -> Q:
    exact: set[str] = set()
    groups: set[str] = set()
    for group, stream_id in snapshot:
        exact |= {f"poll://uni@{group}/{stream_id}", f"poll://any@{group}"}
        groups.add(group)
    anycast = [Q(address__startswith=f"poll://any@{group}/") for group in sorted(groups)]
    return reduce(or_, anycast, Q(address__in=sorted(exact)))


def _connected_elsewhere(group: str, stream_id: str) -> bool:
    fresh = now_ms() - 3 * max(resonate_settings().POLL_FALLBACK_MS, 1000)
    return (
        Subscriber.objects.filter(group=group, stream_id=stream_id, seen_at__gte=fresh)
        .exclude(process=PROCESS)
        .exists()
    )


_hub: Hub | None = None
_hub_lock = threading.Lock()


def get_hub() -> Hub:
    global _hub
    with _hub_lock:
        if _hub is None:
            _hub = Hub()
        return _hub
