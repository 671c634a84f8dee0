"""Query filters for the collections. Query parameters:

- ``state``: the projected state (promises, as ``promise.search``) or the viewed state (tasks, as
  ``task.search``), evaluated at the request's ``now``.
- ``tag=KEY=VALUE``, repeatable: exact match on every given tag (split at the first ``=``, so
  values may contain ``=``); on tasks the tags of the task's promise, on schedules ``promiseTags``.
- ``idPrefix``: ids starting with this string.
- ``createdAfter`` / ``createdBefore``, ``timeoutAfter`` / ``timeoutBefore``, ``settledAfter`` /
  ``settledBefore``, ``nextRunAfter`` / ``nextRunBefore``: the half-open range
  ``[after, before)`` in ms. ``settled*`` uses the projected ``settledAt``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.db.models import Q, QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema_field

from promises.models import ID_MAX_LENGTH, Promise
from promises.selectors import PROMISE_STATES, filter_tags, projected_state_q
from resonate_project.core.conf import resonate_settings
from resonate_project.core.protocol import PENDING
from resonate_project.engine import scope
from schedules.models import Schedule
from tasks_app.models import Task
from tasks_app.selectors import TASK_STATES, viewed_state_q


class TagsField(forms.Field):
    """Repeated ``KEY=VALUE`` query parameters, cleaned to a dict."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> dict[str, str]:
        limit = resonate_settings().MAX_SEARCH_TAGS
        if len(value or []) > limit:
            raise forms.ValidationError(
                f"{len(value)} tags; a search takes at most {limit} (MAX_SEARCH_TAGS)"
            )
        result: dict[str, str] = {}
        for item in value or []:
            key, sep, tag_value = str(item).partition("=")
            if not sep or not key:
                raise forms.ValidationError(f"tag must be KEY=VALUE, got {item!r}")
            if "\0" in item:  # PostgreSQL refuses NUL in text
                raise forms.ValidationError("tag may not contain NUL")
            result[key] = tag_value
        return result


TAG_HELP = (
    "KEY=VALUE, repeatable (tag=a=1&tag=b=2); every tag must match exactly. Split at the first "
    "=, so values may contain = (tag=resonate:target=poll://any@default)."
)


@extend_schema_field(
    {
        "type": "array",
        "items": {
            "type": "string",
            "pattern": "^[^=]+=",
            "example": "resonate:target=poll://any@g",
        },
        "description": TAG_HELP,
    }
)
class TagFilter(filters.Filter):
    field_class = TagsField


class MsFilter(filters.NumberFilter):
    """An instant in ms: an integer, not the decimal django-filter's NumberFilter takes."""

    field_class = forms.IntegerField


PREFIX_HELP = "ids starting with this string"


def after(field: str, wire: str) -> MsFilter:
    return MsFilter(field_name=field, lookup_expr="gte", help_text=f"{wire} >= this (ms)")


def before(field: str, wire: str) -> MsFilter:
    return MsFilter(field_name=field, lookup_expr="lt", help_text=f"{wire} < this (ms)")


class AtNow(filters.FilterSet):
    """A filterset evaluated at the request's ``now`` (ms), read once by the view."""

    def __init__(self, *args: Any, now: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.now = now


class PromiseFilter(AtNow):
    state = filters.ChoiceFilter(
        choices=[(s, s) for s in PROMISE_STATES], method="by_state", help_text="projected state"
    )
    tag = TagFilter(method="by_tags")
    idPrefix = filters.CharFilter(
        field_name="id", lookup_expr=scope.PREFIXED, max_length=ID_MAX_LENGTH, help_text=PREFIX_HELP
    )
    createdAfter = after("created_at", "createdAt")
    createdBefore = before("created_at", "createdAt")
    timeoutAfter = after("timeout_at", "timeoutAt")
    timeoutBefore = before("timeout_at", "timeoutAt")
    settledAfter = MsFilter(method="settled_after", help_text="projected settledAt >= this (ms)")
    settledBefore = MsFilter(method="settled_before", help_text="projected settledAt < this (ms)")

    class Meta:
        model = Promise
        fields: list[str] = []

    def by_state(self, qs: QuerySet[Promise], name: str, value: str) -> QuerySet[Promise]:
        return qs.filter(projected_state_q(value, self.now))

    def by_tags(self, qs: QuerySet[Promise], name: str, value: dict[str, str]) -> QuerySet[Any]:
        return filter_tags(qs, "tags", value)

    def settled(self, qs: QuerySet[Promise], lookup: str, value: int) -> QuerySet[Promise]:
        # A dead pending promise reads as settled at its deadline (fact P).
        dead = Q(state=PENDING, timeout_at__lte=self.now)
        return qs.filter(
            Q(**{f"settled_at__{lookup}": value}) | (dead & Q(**{f"timeout_at__{lookup}": value}))
        )

    def settled_after(self, qs: QuerySet[Promise], name: str, value: int) -> QuerySet[Promise]:
        return self.settled(qs, "gte", value)

    def settled_before(self, qs: QuerySet[Promise], name: str, value: int) -> QuerySet[Promise]:
        return self.settled(qs, "lt", value)


class TaskFilter(AtNow):
    state = filters.ChoiceFilter(
        choices=[(s, s) for s in TASK_STATES], method="by_state", help_text="viewed state"
    )
    tag = TagFilter(method="by_tags")  # the tags of the task's promise
    idPrefix = filters.CharFilter(
        field_name="promise__id",
        lookup_expr=scope.PREFIXED,
        max_length=ID_MAX_LENGTH,
        help_text=PREFIX_HELP,
    )
    createdAfter = after("promise__created_at", "the promise's createdAt")
    createdBefore = before("promise__created_at", "the promise's createdAt")
    timeoutAfter = after("promise__timeout_at", "the promise's timeoutAt")
    timeoutBefore = before("promise__timeout_at", "the promise's timeoutAt")

    class Meta:
        model = Task
        fields: list[str] = []

    def by_state(self, qs: QuerySet[Task], name: str, value: str) -> QuerySet[Task]:
        return qs.filter(viewed_state_q(value, self.now))

    def by_tags(self, qs: QuerySet[Task], name: str, value: dict[str, str]) -> QuerySet[Any]:
        return filter_tags(qs, "promise__tags", value)


class ScheduleFilter(AtNow):
    tag = TagFilter(method="by_tags")  # the schedule's promiseTags
    idPrefix = filters.CharFilter(
        field_name="id", lookup_expr=scope.PREFIXED, max_length=ID_MAX_LENGTH, help_text=PREFIX_HELP
    )
    createdAfter = after("created_at", "createdAt")
    createdBefore = before("created_at", "createdAt")
    nextRunAfter = after("next_run_at", "nextRunAt")
    nextRunBefore = before("next_run_at", "nextRunAt")

    class Meta:
        model = Schedule
        fields: list[str] = []

    def by_tags(self, qs: QuerySet[Schedule], name: str, value: dict[str, str]) -> QuerySet[Any]:
        return filter_tags(qs, "promise_tags", value)


class FilterBackend(filters.DjangoFilterBackend):
    """Hands the view's ``now`` to the filterset."""

    def get_filterset_kwargs(self, request: Any, queryset: Any, view: Any) -> dict[str, Any]:
        return {**super().get_filterset_kwargs(request, queryset, view), "now": view.now}
