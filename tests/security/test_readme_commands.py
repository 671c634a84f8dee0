"""The README's security commands, run exactly as the README shows them (a fresh SQLite file
database; ``python`` is this virtualenv's)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_block(containing: str) -> list[str]:
    """The command lines of the README's first ``sh`` block containing ``containing``."""
    text = (ROOT / "README.md").read_text()
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        if containing in block:
            return [line for line in block.splitlines() if line.strip()]
    raise AssertionError(f"no sh block in README.md contains {containing!r}")


def test_the_credentials_commands_work_as_written(tmp_path: Path) -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RESONATE_", "DJANGO_", "PYTEST_")) and k != "DATABASE_URL"
    }
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'readme.sqlite3'}"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"

    def run(line: str) -> str:
        done = subprocess.run(
            line, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    run("python manage.py migrate --noinput")
    create, listing, revoke = readme_block("resonate credentials create")
    token = run(create).splitlines()[-1]
    assert token.startswith("rsn_")
    listed = run(listing)
    assert "billing-worker" in listed
    assert "billing/" in listed
    assert token not in listed
    assert "revoked credential billing-worker" in run(revoke)
    assert "revoked" in run(listing)


@pytest.mark.parametrize("containing", ["resonate credentials create"])
def test_the_readme_blocks_exist(containing: str) -> None:
    assert readme_block(containing)
