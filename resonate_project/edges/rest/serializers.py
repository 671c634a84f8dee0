"""Request bodies (validated here, then handed to the protocol handlers) and the records served
(built by ``core.protocol`` / ``core.schedules``; the serializers below only document
them in the schema). Field names are the protocol's wire names. Strings are never trimmed: ids
and data are opaque, and types are strict (no number for a string, no string for a number), as
the protocol's own decoding is."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from promises.models import ID_MAX_LENGTH
from promises.selectors import PROMISE_STATES
from resonate_project.core.protocol import SETTABLE
from schedules.models import CRON_MAX_LENGTH
from tasks_app.selectors import TASK_STATES

MS_MAX = 2**63 - 1


class StrictCharField(serializers.CharField):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(trim_whitespace=False, **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


def text(**kwargs: Any) -> StrictCharField:
    kwargs.setdefault("max_length", ID_MAX_LENGTH)
    return StrictCharField(**kwargs)


def ms(**kwargs: Any) -> StrictIntegerField:
    return StrictIntegerField(min_value=0, max_value=MS_MAX, **kwargs)


def tags(**kwargs: Any) -> serializers.DictField:
    return serializers.DictField(child=StrictCharField(allow_blank=True), **kwargs)


class ValueSerializer(serializers.Serializer):
    headers = tags(required=False, allow_null=True)
    data = StrictCharField(allow_blank=True, required=False, allow_null=True)


# --- requests ---------------------------------------------------------------------------------


class PromiseCreateSerializer(serializers.Serializer):
    id = text(min_length=1)
    timeoutAt = ms(help_text="absolute deadline, ms since the epoch")
    param = ValueSerializer(required=False)
    tags = tags(required=False)


class PromiseSettleSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=SETTABLE)
    value = ValueSerializer(required=False)


class ScheduleCreateSerializer(serializers.Serializer):
    id = text(min_length=1)
    cron = text(max_length=CRON_MAX_LENGTH, help_text="5 fields, or 6 with seconds first; UTC")
    promiseId = text(
        allow_blank=True, help_text="occurrence id template: {{.id}} and {{.timestamp}} expand"
    )
    promiseTimeout = ms(help_text="each occurrence's timeout, ms after its instant")
    promiseParam = ValueSerializer(required=False)
    promiseTags = tags(required=False)


# --- records (documentation of core.protocol.promise_record etc.) ---


class PromiseRecordSerializer(serializers.Serializer):
    id = serializers.CharField()
    state = serializers.ChoiceField(choices=PROMISE_STATES, help_text="projected state")
    param = ValueSerializer()
    value = ValueSerializer()
    tags = tags()
    timeoutAt = serializers.IntegerField()
    createdAt = serializers.IntegerField()
    settledAt = serializers.IntegerField(required=False, help_text="absent while pending")


class TaskRecordSerializer(serializers.Serializer):
    id = serializers.CharField()
    state = serializers.ChoiceField(choices=TASK_STATES, help_text="viewed state")
    version = serializers.IntegerField()
    resumes = serializers.IntegerField()
    ttl = serializers.IntegerField(required=False)
    pid = serializers.CharField(required=False)
    releases = serializers.IntegerField(
        help_text="task.release calls since the task last made progress (suspended, resumed, "
        "continued); from the second on, each delays its next execute "
        "(RELEASE_BACKOFF_BASE_MS, doubling up to RELEASE_BACKOFF_MAX_MS)"
    )
    lastReleaseAt = serializers.IntegerField(required=False, help_text="ms: the last release")
    lastPid = serializers.CharField(
        required=False, help_text="the process that acquired the task last"
    )


class ScheduleRecordSerializer(serializers.Serializer):
    id = serializers.CharField()
    cron = serializers.CharField()
    promiseId = serializers.CharField()
    promiseTimeout = serializers.IntegerField()
    promiseParam = ValueSerializer()
    promiseTags = tags()
    createdAt = serializers.IntegerField()
    nextRunAt = serializers.IntegerField()
    lastRunAt = serializers.IntegerField(required=False)


class ErrorDetailSerializer(serializers.Serializer):
    status = serializers.IntegerField()
    message = serializers.CharField()
    field = serializers.CharField(allow_null=True, help_text="the offending field, if one")


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()
