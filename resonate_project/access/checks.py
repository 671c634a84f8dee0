"""System checks for the trust boundary's configuration."""

from __future__ import annotations

import os
from typing import Any

from django.core.checks import Error, register

from resonate_project.access import tokens


@register()
def check_access(app_configs: Any, **kwargs: Any) -> list[Error]:
    """The trust boundary: E001 when JWT_PUBLIC_KEY is set but cannot verify a JWT (not a PEM
    public key, an unreadable file, an unsupported key type; the message says which)."""
    errors = []
    problem = tokens.check_config()
    if problem:
        errors.append(Error(problem, hint="a PEM public key (text or file path)", id="access.E001"))
    if os.environ.get("RESONATE_API_TOKEN"):
        errors.append(
            Error(
                "RESONATE_API_TOKEN is no longer read: the resource API uses the same credentials "
                "as POST / and /poll/",
                hint="set RESONATE_AUTH=required and create a service credential with "
                "`manage.py resonate credentials create NAME`, or configure JWT_PUBLIC_KEY",
                id="access.E002",
            )
        )
    return errors
