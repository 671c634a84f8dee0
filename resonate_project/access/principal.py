"""The principal (defined in the core, so the engine's read scope can name it) and the error a
missing or invalid credential raises."""

from __future__ import annotations

from resonate_project.core.principal import Principal

__all__ = ["AuthError", "Principal"]


class AuthError(Exception):
    """A missing or invalid credential: 401, with a message that says which and nothing more."""

    status = 401
