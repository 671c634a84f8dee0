"""The standalone server's static files (the admin's CSS and JS, the API docs' pages): WhiteNoise
serves them from ``STATIC_ROOT``, compressed (gzip) and, by their hashed names, cached for ever.

Only ``resonate_project/settings.py`` names what is here: an embedding host keeps its own storage
and its own way of serving static files. ``manage.py serve`` runs :func:`collect_if_stale` before
it listens, so ``make run`` and the production command find the files collected.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.conf import settings
from django.contrib.staticfiles import finders
from django.contrib.staticfiles.storage import staticfiles_storage
from django.core.management import CommandError, call_command
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from whitenoise.middleware import WhiteNoiseMiddleware
from whitenoise.storage import CompressedManifestStaticFilesStorage


class Storage(CompressedManifestStaticFilesStorage):
    """WhiteNoise's compressed manifest storage, except that a name the manifest lacks (nothing
    collected yet: a test run, ``uvicorn resonate_project.asgi:application`` started by hand)
    keeps its plain URL instead of failing the page that links it, and a STATIC_ROOT that cannot
    be read counts as nothing collected (``serve`` then says why it cannot collect)."""

    def read_manifest(self) -> str | None:
        try:
            return cast(str | None, super().read_manifest())
        except OSError:  # STATIC_ROOT unreadable (not a directory, say): as if none were there
            return None

    def stored_name(self, name: str) -> str:
        try:
            return str(super().stored_name(name))
        except ValueError:
            return name


def stale_reason() -> str | None:
    """Why ``STATIC_ROOT`` needs a ``collectstatic``, or None when its manifest names every file
    the finders find and is newer than each of them."""
    if not isinstance(staticfiles_storage, Storage):  # a host's own storage: its business
        return None
    manifest = Path(settings.STATIC_ROOT) / Storage.manifest_name
    try:
        collected = manifest.stat().st_mtime
        paths = Storage(location=settings.STATIC_ROOT).load_manifest()[0]
    except (OSError, ValueError):  # missing, unreadable, or not a manifest
        return f"no manifest at {manifest}"
    for finder in finders.get_finders():
        for path, storage in finder.list(None):
            prefix = getattr(storage, "prefix", None)
            name = f"{prefix}/{path}" if prefix else path
            if name.replace(os.sep, "/") not in paths:
                return f"{name} is not collected"
            if os.stat(storage.path(path)).st_mtime > collected:
                return f"{name} changed since the last collectstatic"
    return None


def collect_if_stale(out: Callable[[str], Any]) -> None:
    """``collectstatic`` when :func:`stale_reason` says so, under a lock beside ``STATIC_ROOT``
    (several servers starting at once collect once)."""
    if stale_reason() is None:
        return
    root = Path(settings.STATIC_ROOT)
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        with open(root.parent / f".{root.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            reason = stale_reason()  # another server may have collected meanwhile
            if reason is None:
                return
            out(f"collecting static files into {root} ({reason})")
            call_command("collectstatic", interactive=False, verbosity=0)
    except OSError as exc:
        raise CommandError(
            f"cannot collect the static files into {root} (STATIC_ROOT): {exc}. Run "
            "`manage.py collectstatic --noinput` where it is writable (at build time), or set "
            "DJANGO_STATIC_ROOT to a writable directory"
        ) from exc
        # The storage read the old manifest when it was built: read the new one.
        storage = cast(Storage, staticfiles_storage)
        storage.hashed_files, storage.manifest_hash = storage.load_manifest()


class StaticFiles:
    """WhiteNoise as Django middleware that stays async: WhiteNoise's own middleware is sync
    only, so under ASGI every request (the API's, the admin's) would hop to Django's one sync
    thread. Here only a request under ``STATIC_URL`` goes to a thread, to read its file; the
    file is small (the largest is the API docs' bundle, ~1.5 MB), so it is answered whole rather
    than streamed from a sync iterator (which Django warns about under ASGI)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.whitenoise = WhiteNoiseMiddleware(get_response=None)
        self.prefix: str = self.whitenoise.static_prefix
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        return self._serve(request) or self.get_response(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        if request.path_info.startswith(self.prefix):
            response = await sync_to_async(self._serve, thread_sensitive=False)(request)
            if response is not None:
                return response
        get_response: Callable[[HttpRequest], Awaitable[HttpResponseBase]] = self.get_response
        return await get_response(request)

    def _serve(self, request: HttpRequest) -> HttpResponse | None:
        if not request.path_info.startswith(self.prefix):
            return None
        whitenoise = self.whitenoise
        if whitenoise.autorefresh:  # DEBUG: found afresh in the apps' folders on each request
            static_file = whitenoise.find_file(request.path_info)
        else:
            static_file = whitenoise.files.get(request.path_info)
        if static_file is None:
            return None
        answer = static_file.get_response(request.method, request.META)
        if answer.file is None:
            body = b""
        else:
            with answer.file:
                body = answer.file.read()
        response = HttpResponse(body, status=int(answer.status))
        del response["Content-Type"]
        for key, value in answer.headers:
            response[key] = value
        return response
