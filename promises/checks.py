"""System checks for the RESONATE settings namespace."""

from typing import Any

from django.core.checks import Error, register

from .conf import resonate_settings


@register()
def check_resonate_settings(app_configs: Any, **kwargs: Any) -> list[Error]:
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
    return errors
