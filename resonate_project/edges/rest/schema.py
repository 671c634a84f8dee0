"""OpenAPI additions: the bearer-token scheme, and the protocol endpoint ``POST /`` (a plain
Django view, so drf-spectacular does not see it) documented by a postprocessing hook."""

from __future__ import annotations

from typing import Any

from django.urls import NoReverseMatch, reverse
from drf_spectacular.extensions import OpenApiAuthenticationExtension

from resonate_project.core.protocol import PROTOCOL_VERSION
from resonate_project.edges.kinds import DEBUG_KINDS, PROTOCOL_KINDS

DESCRIPTION = """\
A Resonate durable-execution server.

**`POST /`** is the protocol endpoint the SDKs use: one `{kind, head, data}` envelope per request.

**`/api/`** serves promises, tasks and schedules as resources. Records are the protocol's
projected records (a pending promise past its deadline reads as settled). Lists are ordered by id
and paginated with `cursor`/`limit` (`{next, previous, results}`). Filters: `state` (projected),
`tag=KEY=VALUE` (repeatable, exact), `idPrefix`, and half-open ms ranges such as
`createdAfter`/`createdBefore`. Writes run the same handlers as `POST /`; creates are idempotent
by id and answer 200. Every error is `{"error": {"status", "message", "field"}}`.
"""


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "resonate_project.edges.rest.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "a JWT or service credential; needed when RESONATE_AUTH=required",
        }


def envelope_components() -> dict[str, Any]:
    kinds = [*PROTOCOL_KINDS, *DEBUG_KINDS]
    return {
        "Envelope": {
            "type": "object",
            "required": ["kind"],
            "properties": {
                "kind": {
                    "type": "string",
                    "enum": kinds,
                    "description": "the request kind; debug.* answer 403 unless RESONATE_DEBUG",
                },
                "head": {
                    "type": "object",
                    "properties": {
                        "corrId": {"type": "string", "description": "echoed in the reply"},
                        "version": {"type": "string", "enum": [PROTOCOL_VERSION]},
                    },
                    "additionalProperties": True,
                },
                "data": {
                    "type": "object",
                    "additionalProperties": True,
                    "description": "the kind's request fields (wire names, e.g. timeoutAt)",
                },
            },
        },
        "EnvelopeReply": {
            "type": "object",
            "required": ["kind", "head", "data"],
            "properties": {
                "kind": {"type": "string"},
                "head": {
                    "type": "object",
                    "required": ["corrId", "status", "version"],
                    "properties": {
                        "corrId": {"type": "string"},
                        "status": {"type": "integer"},
                        "version": {"type": "string"},
                    },
                },
                "data": {
                    "description": "an object on 200 and 300, the error message otherwise",
                    "oneOf": [{"type": "object", "additionalProperties": True}, {"type": "string"}],
                },
            },
        },
    }


def only_resonate(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """drf-spectacular preprocessing hook: the resource API's own views (a host site's views are
    its own schema's business)."""
    return [e for e in endpoints if e[3].__module__.startswith("resonate_project.edges.rest.")]


def envelope_path() -> str:
    """Where ``POST`` of an envelope goes: ``/`` standalone, the mount prefix when embedded."""
    try:
        return reverse("resonate-envelope")
    except NoReverseMatch:
        return "/"


def document_envelope(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: adds ``POST /`` and the API's description."""
    result["info"]["description"] = DESCRIPTION
    result.setdefault("components", {}).setdefault("schemas", {}).update(envelope_components())
    reply = {
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EnvelopeReply"}}}
    }
    outcomes = {
        "200": "done",
        "300": "task.suspend: an awaited promise is already settled",
        "400": "malformed envelope or data (the message names the field)",
        "403": "debug.* while the debug surface is off",
        "404": "not found",
        "409": "refused in the object's current state",
        "422": "refused: the awaited promise is internal, or the awaiter has no target",
    }
    result["paths"] = {
        envelope_path(): {
            "post": {
                "operationId": "envelope",
                "summary": "The Resonate protocol: one request kind per envelope",
                "tags": ["protocol"],
                "security": [{}],
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Envelope"}}
                    },
                },
                "responses": {
                    code: {"description": text, **reply} for code, text in outcomes.items()
                },
            }
        },
        **result["paths"],
    }
    return result
