"""Read queries over promises: the projected-state filter, tag filters and the call tree. Each
takes ``now`` when the projection needs it, locks nothing and writes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from promises.models import Promise
from resonate_project.core.protocol import PENDING
from resonate_project.core.tags import PARENT, SCHEDULE

PROMISE_STATES = ("pending", "resolved", "rejected", "rejected_canceled", "rejected_timedout")


def projected_state_q(state: str, now: int) -> Q:
    """Rows whose *projected* state is ``state`` at ``now`` (C8 holds for searches too)."""
    dead = Q(state=PENDING, timeout_at__lte=now)
    if state == "pending":
        return Q(state=PENDING, timeout_at__gt=now)
    if state == "resolved":
        return Q(state="resolved") | (dead & Q(timer=True))
    if state == "rejected_timedout":
        return Q(state="rejected_timedout") | (dead & Q(timer=False))
    return Q(state=state)


def filter_tags(qs: QuerySet[Any], field: str, tags: dict[str, str]) -> QuerySet[Any]:
    """Exact match on every given tag. PostgreSQL: jsonb containment (``@>``). SQLite: each key
    through an explicit text transform (keys are arbitrary strings, even ones with ``__``)."""
    if connection.vendor == "postgresql":
        return qs.filter(**{f"{field}__contains": tags})
    for i, (key, value) in enumerate(sorted(tags.items())):
        text = Cast(KeyTextTransform(key, field), output_field=TextField())
        qs = qs.alias(**{f"_tag{i}": text}).filter(**{f"_tag{i}": value})
    return qs


def promises(state: str | None = None, tags: dict[str, str] | None = None, *, now: int) -> Any:
    """Promises by projected state and exact tags (unordered)."""
    qs = Promise.objects.all()
    if state is not None:
        qs = qs.filter(projected_state_q(state, now))
    if tags:
        qs = filter_tags(qs, "tags", tags)
    return qs


def children_of(parent_ids: Sequence[str], limit: int) -> list[Promise]:
    """The next level of call trees: promises whose ``resonate:parent`` is one of ``parent_ids``
    (with their tasks), oldest first."""
    text = Cast(KeyTextTransform(PARENT, "tags"), output_field=TextField())
    return list(
        Promise.objects.alias(_parent=text)
        .filter(_parent__in=list(parent_ids))
        .select_related("task")
        .order_by("created_at", "id")[:limit]
    )


def schedule_promises(schedule_id: str, limit: int) -> list[Promise]:
    """The occurrences of a schedule (tag ``resonate:schedule``), newest first, with tasks."""
    qs = filter_tags(Promise.objects.select_related("task"), "tags", {SCHEDULE: schedule_id})
    return list(qs.order_by("-created_at", "-id")[:limit])
