"""The previous release: the code an upgrade runs beside while the new migrations apply
(tests/system/test_upgrade.py serves it on the newest schema;
tests/release/test_migrations_online.py lints every migration added since it). Bump it when a
release is cut (CHANGELOG.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

PREVIOUS = "bb3400d601e2251e74a2cbb75721d9efc6794c17"  # 0.1.0


def git_at_previous(*argv: str) -> str:
    """``git ARGV`` naming PREVIOUS in this clone, its output; a failure (the commit is not in a
    shallow or foreign clone) fails the test under CI=true and skips it elsewhere."""
    done = subprocess.run(
        ["git", *argv],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        reason = f"commit {PREVIOUS} is not in this clone: {done.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return done.stdout
