"""HTTP edges: the envelope endpoint ``POST /``, health and readiness probes, and 410 for the
legacy REST paths. The clock is read here, once per request."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import logging
import queue
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import split_domain_port, validate_host
from django.views.decorators.csrf import csrf_exempt

from resonate_project import __version__
from resonate_project.access.auth import bearer
from resonate_project.access.gate import forgeable
from resonate_project.core.clock import now_ms
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import Response
from resonate_project.edges.envelope import (
    Envelope,
    Prepared,
    begin,
    complete,
    conclude,
    handle,
    handle_body,
    parse,
    respond,
)
from resonate_project.edges.home import home_page, wants_html
from resonate_project.edges.kinds import KINDS
from resonate_project.engine.uow import joined
from resonate_project.observability.request import RequestObservation, request_scope

log = logging.getLogger("resonate.envelope")

# Handlers are synchronous (one transaction each). Under ASGI, Django runs every sync view on one
# shared thread per process; the envelope runs on its own threads instead (WEB_THREADS), so
# requests wait on the database in parallel, each thread with its own persistent connection.
# WEB_THREADS=0 keeps Django's shared thread (the in-process test suite, whose transaction lives
# there).
_on_django_thread = sync_to_async(handle_body, thread_sensitive=True)


def _handle(
    env: Envelope, clock_ms: int, bearer: str | None, obs: RequestObservation
) -> tuple[int, bytes]:
    # Request signals (which close stale connections) run on Django's own thread, not this one:
    # drop a connection that failed or outlived CONN_MAX_AGE before using it.
    connection.close_if_unusable_or_obsolete()
    return handle(env, clock_ms, bearer, obs)


def web_threads() -> int:
    """``WEB_THREADS``, with its default (-1) decided by the database: one thread on SQLite (its
    writers queue on one lock, ``resonate_project.sqlite``; measured: a second thread cost a
    quarter of ``make run``'s throughput in hand-offs), two elsewhere."""
    threads = resonate_settings().WEB_THREADS
    if threads >= 0:
        return threads
    return 1 if _vendor() == "sqlite" else 2


@cache
def _vendor() -> str:
    """The default database's vendor, from a wrapper that never connects (``connection`` on an
    event loop is a new wrapper in every request's context)."""
    return str(connections.create_connection(DEFAULT_DB_ALIAS).vendor)


@dataclass(slots=True)
class Request:
    """One envelope for the threads, with the context it runs in (its ``contextvars``, as
    ``sync_to_async`` would carry them)."""

    context_run: Callable[..., Any]
    env: Envelope
    clock: int
    token: str | None
    obs: RequestObservation

    def alone(self) -> tuple[int, bytes]:
        """In a transaction of its own (``_handle``)."""
        return cast(
            tuple[int, bytes],
            self.context_run(_handle, self.env, self.clock, self.token, self.obs),
        )

    def begin(self) -> Prepared | tuple[int, bytes]:
        """Up to its handler, inside the batch's transaction (``envelope.begin``)."""
        return cast(
            Prepared | tuple[int, bytes],
            self.context_run(begin, self.env, self.clock, self.token, self.obs),
        )

    def complete(self, prepared: Prepared) -> tuple[int, bytes]:
        """Its handler, inside the batch's transaction (``envelope.complete``)."""
        return cast(tuple[int, bytes], self.context_run(complete, prepared))

    def conclude(self, prepared: Prepared, res: Response) -> tuple[int, bytes]:
        """Its reply, answered with others (``envelope.conclude``)."""
        return cast(tuple[int, bytes], self.context_run(conclude, prepared, res))


type _Job = tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Callable[[], Any] | Request]
type _Outcome = tuple[Any, BaseException | None]

# A statement that may write (``rows.each`` sends several in one string).
_WRITES = re.compile(rb"(?:^|;)\s*(?:INSERT|UPDATE|DELETE|WITH|MERGE|COPY)\b", re.IGNORECASE)


class _Changes:
    """Whether the statements run since ``mark`` changed a row: SQLite counts every row changed
    on the connection; on PostgreSQL a single statement that may write reports how many rows it
    changed (an ``UPDATE … WHERE`` that matched nothing changed none), and several sent in one
    string count as a change."""

    def __init__(self) -> None:
        self.changed = False
        self.sqlite = connection.vendor == "sqlite"
        self.total = 0

    def mark(self) -> None:
        self.changed = False
        if self.sqlite:
            self.total = connection.connection.total_changes

    def since(self) -> bool:
        if self.sqlite:
            return bool(connection.connection.total_changes != self.total)
        return self.changed

    def watch(self, execute: Any, sql: Any, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if not self.sqlite and not self.changed:
            text = sql.encode() if isinstance(sql, str) else bytes(sql)
            if _WRITES.search(text):
                several = b";" in text.strip().rstrip(b";")
                rowcount = getattr(context.get("cursor"), "rowcount", -1)
                self.changed = several or many or rowcount != 0
        return result


class _Abandon(Exception):
    """The batch cannot commit as it stands: roll it back and run its requests alone."""


def together(requests: list[Request]) -> list[tuple[int, bytes]] | None:
    """Answer ``requests`` in one transaction, with one COMMIT (group commit); None if it was
    rolled back instead, having committed nothing.

    Each request is authenticated, decoded and authorized in arrival order. Requests of a kind
    with a shared form (``Kind.together``: plain promise births and settlements) and distinct ids
    are then answered by one statement per kind (``shared``); the rest run their handlers in
    arrival order, each unit of work joining the transaction without a savepoint
    (``uow.joined``). No answer leaves before the COMMIT, so every request of a batch is
    concurrent with every other, and the order the transaction applies them in is a valid
    order for what the clients saw. A request refused with a 4xx was refused before its first
    write (the handlers' rule, checked here: no row changed for it), so its refusal is its own
    answer and the batch goes on. Any 5xx answer (a database error, a bug), a transaction
    PostgreSQL has aborted, or a refusal after a row was changed abandons the batch: it is rolled
    back and its requests are answered alone."""
    answers: list[tuple[int, bytes]] = []
    try:
        connection.close_if_unusable_or_obsolete()
        connection.ensure_connection()  # SQLite's count of changes is the open connection's
        changes = _Changes()
        with connection.execute_wrapper(changes.watch), transaction.atomic(), joined():
            begun = []
            for request in requests:
                changes.mark()
                begun.append(request.begin())
                if isinstance(begun[-1], tuple):
                    _check(begun[-1][0], changes)
            answered = shared(begun)
            for i, (request, b) in enumerate(zip(requests, begun, strict=True)):
                if isinstance(b, tuple):
                    answers.append(b)
                elif i in answered:
                    answers.append(request.conclude(b, answered[i]))
                else:
                    changes.mark()
                    answers.append(request.complete(b))
                    _check(answers[-1][0], changes)
    except _Abandon:
        connection.close_if_unusable_or_obsolete()
        return None
    except Exception:  # the connection or the COMMIT failed: nothing was committed
        log.warning("a batch of %d requests failed; answering each alone", len(requests))
        connection.close_if_unusable_or_obsolete()
        return None
    return answers


def _check(status: int, changes: _Changes) -> None:
    """Whether the batch may go on after a request answered ``status`` (``together``)."""
    if status >= 500 or _aborted():
        raise _Abandon
    if connection.needs_rollback:  # a refusal raised through its unit of work
        if changes.since():
            raise _Abandon
        transaction.set_rollback(False)


def shared(begun: Sequence[Prepared | tuple[int, bytes]]) -> dict[int, Response]:
    """The answers of the requests in ``begun`` (by position) that a kind's shared form
    (``Kind.together``) gives: per kind, those of its requests whose ids appear once among them,
    when there are at least two, in one call (which writes nothing for a request it leaves)."""
    groups: dict[str, list[int]] = {}
    for i, b in enumerate(begun):
        if isinstance(b, Prepared) and KINDS[b.kind].together is not None:
            groups.setdefault(b.kind, []).append(i)
    out: dict[int, Response] = {}
    for kind, members in groups.items():
        prepared = [cast(Prepared, begun[i]) for i in members]
        seen = Counter(p.req.id for p in prepared)
        unique = [(i, p) for i, p in zip(members, prepared, strict=True) if seen[p.req.id] == 1]
        answer_all = KINDS[kind].together
        if len(unique) < 2 or answer_all is None:
            continue
        found = answer_all([(p.req, p.now) for _, p in unique])
        out.update((i, res) for (i, _), res in zip(unique, found, strict=True) if res is not None)
    return out


def _aborted() -> bool:
    """Whether PostgreSQL has aborted the transaction (a statement failed in it), whatever the
    request answered: nothing more can run in it."""
    if connection.vendor != "postgresql" or connection.connection is None:
        return False
    from psycopg.pq import TransactionStatus  # only here: psycopg is there on PostgreSQL

    return bool(connection.connection.info.transaction_status == TransactionStatus.INERROR)


def _capture(call: Callable[[], Any]) -> _Outcome:
    try:
        return call(), None
    except Exception as exc:
        return None, exc


def answer_batch(calls: list[Callable[[], Any] | Request]) -> list[_Outcome]:
    """The outcomes of ``calls`` (a result, or the exception a call raised), in order: envelope
    requests together when there are several, anything else alone."""
    requests = [c for c in calls if isinstance(c, Request)]
    if len(requests) > 1 and len(requests) == len(calls):
        answers = together(requests)
        if answers is not None:
            return [(a, None) for a in answers]
    return [_capture(c.alone if isinstance(c, Request) else c) for c in calls]


class HandlerThreads:
    """The envelope's threads: a queue of calls, each answered into an asyncio future of the loop
    that asked. The same hand-off as ``loop.run_in_executor``, without its second future, work
    item and thread-count check per call (a third of the hand-off's CPU, measured with a
    do-nothing handler under uvicorn). A thread that turns to the queue takes what is waiting,
    up to ``batch`` envelope requests, and answers them in one transaction (``together``). At
    interpreter exit each thread finishes the calls it has."""

    def __init__(self, threads: int, batch: int = 1) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._batch = max(1, batch)
        self._threads = [
            threading.Thread(target=self._serve, name=f"resonate-envelope-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()
        atexit.register(self.stop)

    def run(self, call: Callable[[], Any] | Request) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._jobs.put((loop, future, call))
        return future

    def stop(self, timeout: float = 10.0) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout)

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            jobs = [job]
            while len(jobs) < self._batch:
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:  # stopping: this thread ends after this batch
                    self._jobs.put(None)
                    break
                jobs.append(more)
            try:
                outcomes = answer_batch([call for _, _, call in jobs])
            except Exception as exc:  # never lose the thread: every caller hears the failure
                log.exception("the envelope thread failed a batch of %d", len(jobs))
                outcomes = [(None, exc)] * len(jobs)
            for (loop, future, _), outcome in zip(jobs, outcomes, strict=True):
                # RuntimeError: the loop closed meanwhile, and nobody waits for the answer.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(_settle, future, *outcome)
        connection.close()  # this thread's own, as it ends


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


_handlers: HandlerThreads | None = None
_handlers_lock = threading.Lock()


def _pool(threads: int) -> HandlerThreads:
    global _handlers
    if _handlers is None:
        with _handlers_lock:
            if _handlers is None:
                _handlers = HandlerThreads(threads, resonate_settings().BATCH_MAX)
    return _handlers


async def answer(body: bytes, authorization: str | None = None) -> tuple[int, bytes]:
    """One envelope in, one out; the clock is read here. ``authorization``
    is the request's Authorization header (a credential in ``head.auth`` takes precedence).

    Every request kind runs on the envelope's threads (``HandlerThreads``), in a batch with what
    else is waiting (``together``), with the request's context variables (as ``sync_to_async``
    would carry them): asgiref's wrapper, built anew per request, was a sixth of a create+settle
    request's server CPU
    (docs/explanation/benchmark-history.md#hot-path-levers-issue-15-measured-2026-12-01)."""
    clock, token = now_ms(), bearer(authorization)
    threads = web_threads()
    if threads == 0:
        return await _on_django_thread(body, clock, token)
    with request_scope() as obs:
        parsed = parse(body)  # once, here: the threads get the envelope
        if isinstance(parsed, tuple):
            obs.status = parsed[0]
            return parsed
        request = Request(contextvars.copy_context().run, parsed, clock, token, obs)
        result: tuple[int, bytes] = await _pool(threads).run(request)
        obs.status = result[0]
        return result


def too_large() -> tuple[int, bytes]:
    limit = resonate_settings().MAX_BODY_BYTES
    return respond("", "", Response(413, f"request body exceeds {limit} bytes (MAX_BODY_BYTES)"))


def refuse_http(headers: Mapping[str, str], check_host: bool = False) -> tuple[int, bytes] | None:
    """The answer to a ``POST /`` refused on its headers alone (lower-cased names): a Host not in
    ``ALLOWED_HOSTS`` (``check_host``: Django's view checks it itself; this closes DNS rebinding,
    which makes a foreign page same-origin), a declared length over ``MAX_BODY_BYTES`` (413,
    before reading it), or a browser-forgeable request."""
    if check_host:
        domain, _ = split_domain_port(headers.get("host", ""))
        allowed = settings.ALLOWED_HOSTS
        if settings.DEBUG and not allowed:  # as Django's own get_host (a new startproject site)
            allowed = [".localhost", "127.0.0.1", "[::1]"]
        if not domain or not validate_host(domain, allowed):
            return respond("", "", Response(400, "Host header not in ALLOWED_HOSTS"))
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > resonate_settings().MAX_BODY_BYTES:
        return too_large()
    refusal = forgeable(headers.get("content-type"), headers.get("origin"), headers.get("host"))
    return None if refusal is None else respond("", "", refusal)


@csrf_exempt
async def envelope(request: HttpRequest) -> HttpResponse:
    """``POST /`` as a Django view (``resonate_project.embed.asgi`` answers it before Django's
    middleware where the application is wrapped)."""
    if request.method != "POST":
        if request.method == "GET" and wants_html(request):  # a browser: what this server is
            return home_page(request)
        return JsonResponse({"error": "POST a {kind, head, data} envelope to this URL"}, status=405)
    headers = {k.lower(): v for k, v in request.headers.items()}
    headers.setdefault("host", request.get_host())
    refused = refuse_http(headers)
    if refused is None:
        # Read at most one byte over the limit (Django's request.body would read it all).
        limit = resonate_settings().MAX_BODY_BYTES
        raw = request.read(limit + 1)
        refused = too_large() if len(raw) > limit else None
    if refused is not None:
        return HttpResponse(refused[1], status=refused[0], content_type="application/json")
    status, body = await answer(raw, request.headers.get("Authorization"))
    return HttpResponse(body, status=status, content_type="application/json")


def health(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"status": "ok", "version": __version__})


def ready(request: HttpRequest) -> HttpResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        # The driver's text names hosts, ports, users and databases: it goes to the log only.
        logging.getLogger("resonate.ready").exception("readiness probe: database unavailable")
        return JsonResponse({"status": "unavailable", "error": "database unavailable"}, status=503)
    return JsonResponse({"status": "ready"})


@csrf_exempt
def gone(request: HttpRequest, rest: str = "") -> HttpResponse:
    return JsonResponse(
        {"error": "This endpoint is no longer supported. Please update to the latest SDK."},
        status=410,
    )
