"""System checks for the RESONATE settings namespace."""

import os
from typing import Any

from django.core.checks import Error, register

from resonate_project.core import addresses
from resonate_project.core.conf import resonate_settings


@register()
def check_resonate_settings(app_configs: Any, **kwargs: Any) -> list[Error]:
    """The RESONATE namespace: E000 when it cannot be read at all (an unknown key, or a value
    of the wrong type; the message names it), else each value's bounds."""
    try:
        conf = resonate_settings()
    except (ValueError, TypeError) as exc:
        return [Error(str(exc), id="resonate.E000")]
    errors = []
    if conf.RETRY_TIMEOUT_MS <= 0:
        errors.append(
            Error(
                "RESONATE['RETRY_TIMEOUT_MS'] must be > 0",
                hint="0 keeps the retry step firing forever "
                "(spec: well_formed_config_retry_positive).",
                id="resonate.E001",
            )
        )
    if not 0 < conf.SEARCH_LIMIT_DEFAULT <= conf.SEARCH_LIMIT_MAX:
        errors.append(
            Error("SEARCH_LIMIT_DEFAULT must be in 1..SEARCH_LIMIT_MAX", id="resonate.E002")
        )
    for name in ("STEP_BATCH", "DRAIN_BATCH", "TICK_INTERVAL_MS", "SCHEDULE_CATCHUP_BATCH"):
        if getattr(conf, name) <= 0:
            errors.append(Error(f"RESONATE['{name}'] must be > 0", id="resonate.E003"))
    if conf.IN_FLIGHT_MS <= 2 * conf.PUSH_TIMEOUT_MS:
        errors.append(
            Error(
                "RESONATE['IN_FLIGHT_MS'] must exceed twice PUSH_TIMEOUT_MS",
                hint="a push claim waits up to one timeout before its POST starts and may take "
                "another; a shorter lease lets a second drainer send it again.",
                id="resonate.E004",
            )
        )
    if conf.AUTH not in {"", "off", "required"}:
        errors.append(
            Error(
                f"RESONATE['AUTH'] is {conf.AUTH!r}; it must be 'required' or 'off' (or unset)",
                hint="RESONATE_AUTH=required authenticates POST /, /poll/ and /api/; "
                "RESONATE_AUTH=off serves them open on purpose.",
                id="resonate.E010",
            )
        )
    return errors


@register()
def check_push_settings(app_configs: Any, **kwargs: Any) -> list[Error]:
    """Where HTTP push may go and what it may carry (docs/how-to/push.md#reach-your-own-network)."""
    errors = []
    if "RESONATE_PUSH_BEARER_TOKEN" in os.environ:
        errors.append(
            Error(
                "RESONATE_PUSH_BEARER_TOKEN is no longer read: one token sent to every push "
                "address leaks it to whoever registers an address",
                hint='set RESONATE_PUSH_CREDENTIALS=\'{"hooks.example.com": "Bearer <token>"}\' '
                "(sent as Authorization to that host only) and unset RESONATE_PUSH_BEARER_TOKEN.",
                id="resonate.E020",
            )
        )
    try:
        conf = resonate_settings()
    except (ValueError, TypeError):
        return errors  # reported by check_resonate_settings
    try:
        addresses.parse_allowed(conf.PUSH_ALLOWED)
    except ValueError as exc:
        errors.append(
            Error(
                str(exc),
                hint="comma-separated host names, *.example.com wildcards, IPs and CIDRs",
                id="resonate.E021",
            )
        )
    try:
        addresses.parse_credentials(conf.PUSH_CREDENTIALS)
    except ValueError as exc:
        errors.append(Error(str(exc), id="resonate.E022"))
    for name in ("PUSH_CONCURRENCY", "PUSH_PER_HOST_CONCURRENCY"):
        if getattr(conf, name) <= 0:
            errors.append(Error(f"RESONATE['{name}'] must be > 0", id="resonate.E023"))
    return errors
