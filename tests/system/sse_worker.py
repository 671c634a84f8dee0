"""A worker for the SSE tests, run as its own process so a test can freeze (SIGSTOP) and kill
(SIGKILL) it: ``python -m tests.system.sse_worker BASE_URL GROUP ID AWAITED``.

It opens ``GET BASE_URL/poll/GROUP/ID``, registers ``poll://uni@GROUP/ID`` as a listener on the
promise ``AWAITED`` (as an SDK does), prints ``registered <status>``, then prints every ``data:``
frame it reads, one per line. ``SSE_WORKER_TOKEN``, when set, is sent as a bearer token.
"""

from __future__ import annotations

import os
import sys

import httpx


def main(base_url: str, group: str, stream_id: str, awaited: str) -> None:
    token = os.environ.get("SSE_WORKER_TOKEN")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{base_url}/poll/{group}/{stream_id}"
    with (
        httpx.Client(timeout=None, headers=headers) as client,
        client.stream("GET", url, headers={"Accept": "text/event-stream"}) as res,
    ):
        res.raise_for_status()
        lines = res.iter_lines()
        for line in lines:
            if line.startswith(":"):  # the stream is open
                break
        envelope = {
            "kind": "promise.register_listener",
            "head": {"corrId": f"{stream_id}-listen"},
            "data": {"awaited": awaited, "address": f"poll://uni@{group}/{stream_id}"},
        }
        registered = client.post(f"{base_url}/", json=envelope, timeout=60)
        print(f"registered {registered.status_code}", flush=True)
        for line in lines:
            if line.startswith("data:"):
                print(line[len("data:") :].strip(), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
