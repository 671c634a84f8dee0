"""Wire request types (spec §2.3), one module per object kind, decoded with msgspec."""

from __future__ import annotations

from typing import Any

import msgspec

from resonate_project.core.errors import invalid


def checked[T](wire_type: type[T], **fields: Any) -> T:
    """A request of ``wire_type`` from keyword arguments given by their wire names, validated
    exactly as the envelope validates a decoded body (an ``InvalidRequest`` naming the field)."""
    try:
        return msgspec.convert(fields, wire_type)
    except msgspec.ValidationError as exc:
        raise invalid(exc) from None
