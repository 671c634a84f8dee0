"""How a command's requests travel: to the local database through the envelope's own path
(``local``), or to a running server as envelopes over HTTP (``remote``); ``Ctx`` is what every
command gets."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from resonate_project import USER_AGENT
from resonate_project.core.protocol import Response

# With --server nothing here needs Django: manage.py runs such a call through main_remote,
# without setting Django up (a quarter of the CPU a call costs otherwise; bench/cli_cpu.py). So
# what the local database needs (the typed services, the models, the Tasks worker) is imported
# where a local command runs, never at the top of a module of this package.

DEFAULT_TARGET = "poll://any@default"
PAGE = 1000  # promises per search while walking a call tree (the protocol's maximum)
HTTP_TIMEOUT_S = 30.0
SETTLE_STATES = {"resolve": "resolved", "reject": "rejected", "cancel": "rejected_canceled"}

Send = Callable[[str, dict[str, Any]], Response]
Out = Callable[[str], Any]


class CliError(Exception):
    """A refusal or an unreachable server, reported as the command's error."""


# --- transport ----------------------------------------------------------------------------------


def local(now: int) -> Send:
    """Send a kind to the local database through the envelope's own path (``envelope.call``: the
    same decoding, checks and handler as ``POST /``, as a trusted caller), so a command answers
    alike with or without --server."""
    from resonate_project.edges.envelope import call
    from resonate_project.edges.kinds import CLI_KINDS

    def send(kind: str, data: dict[str, Any]) -> Response:
        assert kind in CLI_KINDS, f"{kind} is not a kind the command line sends (edges.kinds)"
        return call(kind, data, now)

    return send


def remote(url: str, token: str | None) -> Send:
    endpoint = url.rstrip("/") + "/"
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    headers = {"User-Agent": USER_AGENT}
    if token:
        headers["Authorization"] = f"Bearer {token}"

    def send(kind: str, data: dict[str, Any]) -> Response:
        envelope = {"kind": kind, "head": {"corrId": uuid.uuid4().hex}, "data": data}
        try:
            reply = httpx.post(endpoint, json=envelope, headers=headers, timeout=HTTP_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise CliError(f"cannot reach {endpoint}: {exc}") from exc
        try:
            body = reply.json()
            return Response(int(body["head"]["status"]), body["data"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CliError(
                f"{endpoint} answered HTTP {reply.status_code} without a protocol reply"
            ) from exc

    return send


@dataclass
class Ctx:
    send: Send
    now: int
    out: Out
    json: bool

    def request(self, kind: str, data: dict[str, Any]) -> Any:
        res = self.send(kind, data)
        if not res.ok:
            raise CliError(f"{kind}: {res.status} {res.data}")
        return res.data

    def show(self, data: Any, human: Callable[[], list[str]]) -> None:
        for line in [json.dumps(data, indent=2)] if self.json else human():
            self.out(line)
