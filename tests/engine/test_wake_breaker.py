"""A Redis host that stops answering (a network partition, not a refused connection) costs the
web process one socket timeout per back-off, not one per request: after a failure the wake-ups
and drains it would publish are skipped, then one caller at a time tries again
(``engine.wake.Breaker``). What is skipped is covered by the 1 s poll and the next tick."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from django.test import override_settings

from resonate_project.engine import wake


def test_after_a_failure_nothing_is_tried_until_the_back_off_then_one_caller_tries() -> None:
    breaker = wake.Breaker(backoff_s=0.2, max_s=0.4)
    assert breaker.allow()
    breaker.failed()
    assert not breaker.allow()  # within the back-off: skipped
    time.sleep(0.25)
    assert breaker.allow()  # one caller tries ...
    assert not breaker.allow()  # ... and the others keep skipping while it does
    breaker.failed()  # it failed again: the back-off doubles
    time.sleep(0.25)
    assert not breaker.allow()
    time.sleep(0.2)
    assert breaker.allow()
    breaker.succeeded()  # the host is back: every caller sends again
    assert breaker.allow()
    assert breaker.allow()


@pytest.fixture
def silent_redis() -> Iterator[tuple[str, list[socket.socket]]]:
    """A loopback port that accepts connections and never answers (a host cut off mid-link)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    url = f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    try:
        yield url, accepted
    finally:
        server.close()
        for conn in accepted:
            conn.close()


def test_a_silent_redis_host_is_waited_for_once_not_on_every_commit(
    silent_redis: tuple[str, list[socket.socket]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, accepted = silent_redis
    monkeypatch.setattr(wake, "_notify_breaker", wake.Breaker(backoff_s=30.0))
    with override_settings(RESONATE={"NOTIFY_URL": url}):
        wake.redis_url.cache_clear()
        wake._publisher.cache_clear()
        try:
            for _ in range(5):  # five commits' wake-ups while the host does not answer
                wake.kick(False)
        finally:
            wake.redis_url.cache_clear()
            wake._publisher.cache_clear()
    # The first publish waited for its socket timeout; the four after it were skipped.
    assert len(accepted) == 1
