"""The SDK toolchains the end-to-end suite runs, set up idempotently under ``.e2e/``.

* ``.e2e/py``: a Python >= 3.12 virtualenv with ``resonate-sdk`` at :data:`PY_SDK`.
* ``.e2e/node``: ``npm ci`` of ``programs/package.json`` (``@resonatehq/sdk`` pinned), plus copies
  of the ``.mjs`` programs, so that their bare ``import "@resonatehq/sdk"`` resolves there.

Each setup writes a stamp only after it succeeded; a stamp that matches means nothing is done. A
file lock keeps two pytest processes (``-n 2``) from installing at once. When a tool cannot be
had, :class:`Missing` says why: the fixtures turn it into a skip, or a failure under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".e2e"
PROGRAMS = Path(__file__).resolve().parent / "programs"
PY_SDK = "resonate-sdk==0.8.1"
TS_SDK_VERSION = "0.11.5"


class Missing(Exception):
    """A tool the suite needs is not available; the message says what and why."""


@dataclass(frozen=True)
class PythonSdk:
    python: Path


@dataclass(frozen=True)
class NodeSdk:
    node: str
    workdir: Path  # holds node_modules and the programs

    def argv(self, program: str, *args: str) -> list[str]:
        """Node 20 lacks ``Promise.withResolvers`` (the SDK wants Node 22): preload a polyfill."""
        here = self.workdir
        return [self.node, "--import", str(here / "polyfill.mjs"), str(here / program), *args]


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    CACHE.mkdir(exist_ok=True)
    with (CACHE / f".{name}.lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(argv: list[str], cwd: Path, what: str, timeout: float = 600) -> None:
    try:
        done = subprocess.run(
            argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Missing(f"{what}: {exc}") from exc
    if done.returncode != 0:
        output = done.stdout[-2000:] + done.stderr[-2000:]
        raise Missing(f"{what} failed ({done.returncode}):\n{output}")


def _is_py312(candidate: str) -> bool:
    try:
        done = subprocess.run(
            [candidate, "-c", "import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def find_python() -> str:
    """python3.13/3.12 on PATH (a pyenv shim may exist and still fail), then pyenv's installs,
    then the interpreter running the tests."""
    candidates: list[str] = []
    for name in ("python3.13", "python3.12"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    pyenv = Path("/root/.pyenv/versions")
    if pyenv.is_dir():
        installs = sorted(pyenv.glob("3.1[23]*/bin/python3"), reverse=True)
        candidates.extend(str(p) for p in installs)
    candidates.append(sys.executable)
    for candidate in candidates:
        if _is_py312(candidate):
            return candidate
    raise Missing("no Python >= 3.12 (python3.12/3.13 on PATH or under /root/.pyenv/versions)")


def _imports_sdk(python: Path) -> bool:
    try:
        done = subprocess.run(
            [str(python), "-c", "import resonate.resonate"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def python_sdk() -> PythonSdk:
    venv = CACHE / "py"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    with _locked("py"):
        if stamp.is_file() and stamp.read_text() == PY_SDK and _imports_sdk(python):
            return PythonSdk(python)
        stamp.unlink(missing_ok=True)
        base = find_python()
        _run([base, "-m", "venv", "--clear", str(venv)], ROOT, "creating .e2e/py")
        _run(
            [str(python), "-m", "pip", "install", "-q", PY_SDK],
            ROOT,
            f"pip install {PY_SDK}",
        )
        stamp.write_text(PY_SDK)
    return PythonSdk(python)


def _lock_digest() -> str:
    data = (PROGRAMS / "package.json").read_bytes() + (PROGRAMS / "package-lock.json").read_bytes()
    return hashlib.sha256(data).hexdigest()


def node_sdk() -> NodeSdk:
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        raise Missing("node and npm are needed for the TypeScript SDK programs")
    workdir = CACHE / "node"
    stamp = workdir / ".installed"
    with _locked("node"):
        workdir.mkdir(parents=True, exist_ok=True)
        digest = _lock_digest()
        sdk_pkg = workdir / "node_modules" / "@resonatehq" / "sdk" / "package.json"
        if not (stamp.is_file() and stamp.read_text() == digest and sdk_pkg.is_file()):
            for name in ("package.json", "package-lock.json"):
                shutil.copyfile(PROGRAMS / name, workdir / name)
            _run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                workdir,
                "npm ci (@resonatehq/sdk)",
            )
            stamp.write_text(digest)
        # The programs are copied on every session so that edits to them take effect.
        for program in PROGRAMS.glob("*.mjs"):
            shutil.copyfile(program, workdir / program.name)
    return NodeSdk(node, workdir)


def env_for_programs(url: str) -> dict[str, str]:
    """The environment an SDK program runs in: no server or test settings leak into it."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "DJANGO_", "PYTEST_", "CELERY_", "VIRTUAL_ENV"))
        and k not in {"DATABASE_URL", "PYTHONPATH"}
    }
    env["RESONATE_URL"] = url
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env
