"""The envelope protocol: ``{kind, head, data}`` in, ``{kind, head: {corrId, status, version},
data}`` out (wire-and-sdks §2.4, §5.3). Parsing decides every shape 400 before a handler runs."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

import msgspec
from django.db import InterfaceError, OperationalError, connection

from resonate_project.access.auth import authenticate
from resonate_project.access.principal import AuthError, Principal
from resonate_project.access.rules import authorize, named_ids
from resonate_project.core.conf import resonate_settings
from resonate_project.core.errors import ProtocolError
from resonate_project.core.limits import unstorable_refusal
from resonate_project.core.protocol import PROTOCOL_VERSION, Response, bad_request
from resonate_project.edges.json_depth import depth_refusal
from resonate_project.edges.kinds import KINDS
from resonate_project.engine import scope
from resonate_project.engine.uow import batched
from resonate_project.observability.request import RequestObservation, request_scope

log = logging.getLogger("resonate.envelope")

DEBUG_TIME = "resonate:debug_time"
# PostgreSQL deadlock_detected / serialization_failure: the transaction did nothing; run it again.
RETRYABLE_SQLSTATES = {"40P01", "40001"}
ATTEMPTS = 5
# A JSON \u0000 escape not itself escaped: PostgreSQL cannot store NUL in text or jsonb, so it is
# refused on every database alike.
_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


class Envelope(msgspec.Struct):
    kind: str
    head: dict[str, Any] = msgspec.field(default_factory=dict)
    data: msgspec.Raw = msgspec.Raw(b"{}")


_envelope_decoder = msgspec.json.Decoder(Envelope)
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}
_encoder = msgspec.json.Encoder()


def _decoder(t: type) -> msgspec.json.Decoder[Any]:
    dec = _decoders.get(t)
    if dec is None:
        dec = _decoders[t] = msgspec.json.Decoder(t)
    return dec


def _field_error(exc: msgspec.ValidationError, prefix: str = "$.data") -> str:
    return str(exc).replace("`$", f"`{prefix}", 1)


def _guess_kind(body: bytes) -> str:
    try:
        raw = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return ""
    kind = raw.get("kind") if isinstance(raw, dict) else None
    return kind if isinstance(kind, str) else ""


def respond(kind: str, corr_id: str, res: Response) -> tuple[int, bytes]:
    body = {
        "kind": kind,
        "head": {"corrId": corr_id, "status": res.status, "version": PROTOCOL_VERSION},
        "data": res.data,
    }
    return res.status, _encoder.encode(body)


def handle_body(body: bytes, clock_ms: int, bearer: str | None = None) -> tuple[int, bytes]:
    """Decode one envelope, authenticate it (``head.auth``, else the ``Authorization: Bearer``
    token given as ``bearer``), run its handler at ``now``, encode the reply."""
    with request_scope() as obs:
        parsed = parse(body)
        status, reply = (
            parsed if isinstance(parsed, tuple) else handle(parsed, clock_ms, bearer, obs)
        )
        obs.status = status
        return status, reply


def parse(body: bytes) -> Envelope | tuple[int, bytes]:
    """The envelope, or the reply refusing the body: too large (413), too deep, not JSON or not
    an envelope (400)."""
    conf = resonate_settings()
    if len(body) > conf.MAX_BODY_BYTES:
        too_big = f"request body exceeds {conf.MAX_BODY_BYTES} bytes (MAX_BODY_BYTES)"
        return respond("", "", Response(413, too_big))
    if too_deep := depth_refusal(body):
        return respond("", "", bad_request(too_deep))
    try:
        env: Envelope = _envelope_decoder.decode(body)
    except msgspec.ValidationError as exc:
        kind = _guess_kind(body)
        return respond(kind, "", bad_request(f"invalid envelope: {exc}"))
    except msgspec.DecodeError as exc:
        refusal = unstorable_refusal(body) or f"request body is not valid JSON: {exc}"
        return respond("", "", bad_request(refusal))
    return env


def _observe(env: Envelope, bearer: str | None, obs: RequestObservation) -> tuple[str, Any]:
    """The request's corrId ("" unless a string) and its token, noted in ``obs``."""
    obs.kind = env.kind
    corr = env.head.get("corrId", "")
    obs.corr_id = corr if isinstance(corr, str) else ""
    return obs.corr_id, env.head.get("auth", bearer)


# What says the database is unreachable, restarting or busy rather than that the statement cannot
# run: SQLite's BUSY, LOCKED, NOMEM, IOERR, FULL, CANTOPEN and PROTOCOL result codes; PostgreSQL's
# connection exception, transaction rollback, insufficient resources, operator intervention and
# system error classes, and lock_not_available.
_SQLITE_UNAVAILABLE = frozenset({5, 6, 7, 10, 13, 14, 15})
_PG_UNAVAILABLE = ("08", "40", "53", "57", "58", "55P03")


def unavailable(exc: OperationalError) -> bool:
    """Whether the same request may succeed once the database is back (503). A statement the
    database refuses, such as SQLite's "too many SQL variables", is a bug to log (500): the
    request limits are meant to keep every such statement from being sent."""
    cause = exc.__cause__
    sqlite_code = getattr(cause, "sqlite_errorcode", None)
    if sqlite_code is not None:
        return sqlite_code & 0xFF in _SQLITE_UNAVAILABLE
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate is not None:
        return bool(sqlstate.startswith(_PG_UNAVAILABLE))
    # No code: the driver lost the server before an answer, unless libpq refused to send the
    # query itself (over 65,535 parameters).
    return "number of parameters" not in str(cause)


def _failure(kind: str, exc: Exception) -> Response:
    """The reply to a request that raised instead of answering."""
    if isinstance(exc, AuthError):
        return Response(exc.status, str(exc))
    if isinstance(exc, ProtocolError):
        return Response(exc.status, exc.message)
    if isinstance(exc, InterfaceError) or (isinstance(exc, OperationalError) and unavailable(exc)):
        # The database is unreachable or restarting: nothing was committed, and the same request
        # can be sent again. 503 says so (500 would say the server is broken).
        log.warning("%s: database unavailable: %s", kind, exc)
        return Response(503, "database unavailable; retry the request")
    log.exception("%s failed", kind, exc_info=exc)
    return Response(500, "internal server error")


def handle(
    env: Envelope, clock_ms: int, bearer: str | None, obs: RequestObservation
) -> tuple[int, bytes]:
    """``handle_body`` for a parsed envelope, inside the caller's ``request_scope``."""
    begun = begin(env, clock_ms, bearer, obs)
    return begun if isinstance(begun, tuple) else complete(begun)


@dataclass(slots=True)
class Prepared:
    """An envelope authenticated, decoded and authorized, its handler not yet run."""

    kind: str
    corr_id: str
    handler: Any
    req: Any
    now: int
    principal: Principal | None


def begin(
    env: Envelope, clock_ms: int, bearer: str | None, obs: RequestObservation
) -> Prepared | tuple[int, bytes]:
    """``handle`` up to its handler: the reply refusing the envelope, or what the handler runs
    on (``complete`` runs it; a batch may answer it with others, ``conclude``)."""
    corr_id, token = _observe(env, bearer, obs)
    if token is not None and not isinstance(token, str):
        return respond(env.kind, corr_id, bad_request("head.auth must be a string"))
    try:
        principal = authenticate(token, clock_ms)
        debug = resonate_settings().DEBUG
        prepared = prepare(env.kind, env.head, env.data, clock_ms, debug, principal, obs)
    except Exception as exc:
        if isinstance(exc, OperationalError | InterfaceError):
            connection.close_if_unusable_or_obsolete()
        prepared = _failure(env.kind, exc)
    if isinstance(prepared, Response):
        return respond(env.kind, corr_id, prepared)
    handler, req, now = prepared
    return Prepared(env.kind, corr_id, handler, req, now, principal)


def complete(p: Prepared) -> tuple[int, bytes]:
    """Run a prepared envelope's handler as ``p.principal`` and encode the reply."""
    try:
        with scope.acting_as(p.principal):
            res = run(p.handler, p.req, p.now)
    except Exception as exc:
        if isinstance(exc, OperationalError | InterfaceError):
            connection.close_if_unusable_or_obsolete()
        res = _failure(p.kind, exc)
    return conclude(p, res)


def conclude(p: Prepared, res: Response) -> tuple[int, bytes]:
    """The encoded reply to ``p``, as its caller may see it."""
    return respond(p.kind, p.corr_id, scoped(res, p.principal))


def answer(
    kind: str,
    head: dict[str, Any],
    data: bytes | msgspec.Raw,
    clock_ms: int,
    debug: bool,
    principal: Principal | None = None,
    obs: RequestObservation | None = None,
) -> Response:
    """Run one request kind; ``principal`` None means unrestricted (auth not required, or a
    trusted in-process caller). ``obs`` receives the ids the request names."""
    prepared = prepare(kind, head, data, clock_ms, debug, principal, obs)
    if isinstance(prepared, Response):
        return prepared
    with scope.acting_as(principal):
        return scoped(run(*prepared), principal)


def scoped(res: Response, principal: Principal | None) -> Response:
    """The reply as a narrowed caller may see it (``engine.scope.guard``)."""
    if principal is None or not principal.restricted:
        return res
    data, leaked = scope.guard(res.data, principal)
    if leaked:
        log.error("scope: refused a reply naming a record outside %r", principal.prefix)
        return Response(403, "the answer names an id outside this credential's prefix")
    return Response(res.status, data)


def prepare(
    kind: str,
    head: dict[str, Any],
    data: bytes | msgspec.Raw,
    clock_ms: int,
    debug: bool,
    principal: Principal | None = None,
    obs: RequestObservation | None = None,
) -> tuple[Any, Any, int] | Response:
    """Everything ``answer`` decides before the handler runs: the refusal, or the kind's handler,
    its decoded and authorized request, and ``now``."""
    if not isinstance(head.get("corrId", ""), str):
        return bad_request("head.corrId must be a string")
    version = head.get("version")
    if version is not None and version != PROTOCOL_VERSION:
        return bad_request(
            f"unsupported protocol version {version!r}; this server speaks {PROTOCOL_VERSION}"
        )
    entry = KINDS.get(kind)
    if entry is None:
        return bad_request(f"unknown kind {kind!r}")
    if entry.debug:
        if not debug:
            return Response(403, "debug operations are disabled (set RESONATE_DEBUG)")
        if principal is not None and not principal.admin:
            return Response(403, "debug operations need an admin credential")
    now = clock_ms
    if debug and DEBUG_TIME in head:
        if principal is not None and not principal.admin:
            return Response(403, f"head.{DEBUG_TIME} needs an admin credential")
        debug_time = head[DEBUG_TIME]
        if not isinstance(debug_time, int) or isinstance(debug_time, bool) or debug_time < 0:
            return bad_request("head.resonate:debug_time must be a non-negative integer (ms)")
        now = debug_time
    req_type = entry.request
    handler = entry.handler
    raw = bytes(data)
    if b"\\u0000" in raw and _NUL.search(raw):
        return bad_request(
            unstorable_refusal(raw, "$.data") or "strings in data may not contain NUL (\\u0000)"
        )
    try:
        req = _decoder(req_type).decode(raw)
    except msgspec.ValidationError as exc:
        return bad_request(f"invalid data: {_field_error(exc)}")
    except msgspec.DecodeError as exc:
        return bad_request(unstorable_refusal(raw, "$.data") or f"data is not valid JSON: {exc}")
    if obs is not None and obs.detailed:
        obs.ids = list(named_ids(req))
    req, refusal = authorize(kind, req, principal)
    if refusal is not None:
        return refusal
    return handler, req, now


def run(handler: Any, req: Any, now: int) -> Response:
    """Call a handler, turning its refusal into the reply and running it again if PostgreSQL
    aborted it for a deadlock or a serialization failure (its transaction rolled back, so nothing
    happened)."""
    for attempt in range(ATTEMPTS):
        try:
            return handler(req, now)
        except ProtocolError as refused:
            return Response(refused.status, refused.message)
        except OperationalError as exc:
            code = getattr(getattr(exc, "__cause__", None), "sqlstate", None)
            if code not in RETRYABLE_SQLSTATES or attempt == ATTEMPTS - 1 or batched():
                raise  # in a batch: the batch is abandoned and this runs again alone
            log.info("retrying %s after %s", handler.__name__, code)
    raise AssertionError("unreachable")


def call(kind: str, data: dict[str, Any], now: int, principal: Principal | None = None) -> Response:
    """Run one request kind from Python (admin actions, commands, tests) exactly as the API does,
    as ``principal`` (None: a trusted caller)."""
    return answer(kind, {}, msgspec.json.encode(data), now, resonate_settings().DEBUG, principal)
