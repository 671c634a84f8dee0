"""``/api/outbox``: the messages still to be delivered and the dead letters, and re-send.

``GET /api/outbox?state=dead`` lists the push messages that ran out of attempts
(``PUSH_MAX_ATTEMPTS``) or age (``PUSH_MAX_AGE_MS``) with their last error;
``POST /api/outbox/{key}/resend`` makes one due now with its attempts reset, a dead letter
included (as the admin's "re-send"). ``?state=undeliverable`` lists the unicast poll messages set
aside for want of their stream; ``POST /api/outbox/{key}/purge`` deletes a dead letter or an
undeliverable message. A key ending in ``/resend`` or ``/purge`` is acted on from the admin.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django_filters import rest_framework as filters
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from outbox.models import PUSH_Q, Message, MessageKind
from outbox.selectors import message_record
from outbox.services import MESSAGE_NOT_FOUND, purge, resend
from promises.models import ID_MAX_LENGTH
from resonate_project.core.errors import NotFound
from resonate_project.edges.rest.filters import AtNow
from resonate_project.edges.rest.own import documented
from resonate_project.edges.rest.views import ResourceView, errors
from resonate_project.engine import scope


class OutboxFilter(AtNow):
    state = filters.ChoiceFilter(
        choices=[("live", "live"), ("dead", "dead"), ("undeliverable", "undeliverable")],
        method="by_state",
        help_text="dead: dead letters (no more attempts until re-sent); undeliverable: unicast "
        "poll messages whose stream stayed away UNDELIVERABLE_AFTER_MS (due again when it "
        "connects); live: the others",
    )
    kind = filters.ChoiceFilter(choices=MessageKind.choices, help_text="execute or unblock")
    transport = filters.ChoiceFilter(
        choices=[("push", "push"), ("poll", "poll")],
        method="by_transport",
        help_text="push: http(s):// addresses; poll: poll:// (SSE)",
    )
    keyPrefix = filters.CharFilter(
        field_name="key",
        lookup_expr=scope.PREFIXED,
        max_length=ID_MAX_LENGTH,
        help_text="keys starting with this string (a task id, or a promise id for unblock)",
    )

    class Meta:
        model = Message
        fields: list[str] = []

    def by_state(self, qs: QuerySet[Message], name: str, value: str) -> QuerySet[Message]:
        if value == "undeliverable":
            return qs.filter(undeliverable_at__isnull=False)
        if value == "dead":
            return qs.filter(dead_at__isnull=False, undeliverable_at__isnull=True)
        return qs.filter(dead_at__isnull=True)

    def by_transport(self, qs: QuerySet[Message], name: str, value: str) -> QuerySet[Message]:
        return qs.filter(PUSH_Q if value == "push" else Q(address__startswith="poll://"))


class TaskRefSerializer(serializers.Serializer):
    id = serializers.CharField()
    version = serializers.IntegerField()


class PromiseRefSerializer(serializers.Serializer):
    id = serializers.CharField()
    state = serializers.CharField()


class MessageRecordSerializer(serializers.Serializer):
    """Documents ``outbox.selectors.message_record``."""

    key = serializers.CharField()
    kind = serializers.ChoiceField(choices=MessageKind.choices)
    address = serializers.CharField()
    createdAt = serializers.IntegerField()
    attempts = serializers.IntegerField(help_text="failed attempts since written or re-sent")
    nextAttemptAt = serializers.IntegerField()
    lastError = serializers.CharField(allow_blank=True, help_text="why the last attempt failed")
    task = TaskRefSerializer(required=False, help_text="execute: the task and version")
    promise = PromiseRefSerializer(required=False, help_text="unblock: the settled promise")
    deadAt = serializers.IntegerField(
        required=False, help_text="present on a dead letter and an undeliverable message"
    )
    undeliverableAt = serializers.IntegerField(
        required=False,
        help_text="present on an undeliverable message: when it was set aside (its stream "
        "stayed away UNDELIVERABLE_AFTER_MS)",
    )


class OutboxList(ResourceView):
    queryset = Message.objects.all()
    filterset_class = OutboxFilter

    @documented(
        operation_id="outbox_list",
        responses={200: MessageRecordSerializer(many=True), **errors(400, 401, 403)},
        description="Messages not yet delivered, by key; state=dead lists the dead letters.",
    )
    def get(self, request: Request) -> Response:
        return self.page(message_record)


class OutboxResend(ResourceView):
    queryset = Message.objects.all()  # what this credential may see (ResourceView)

    @documented(
        operation_id="outbox_resend",
        request=None,
        responses={200: MessageRecordSerializer, **errors(400, 401, 403, 404)},
        description="Due now, attempts and error cleared, a dead letter live again. Delivery "
        "stays at least once: a message in flight may arrive twice.",
    )
    def post(self, request: Request, key: str) -> Response:
        if not self.get_queryset().filter(pk=key).exists():
            raise NotFound(MESSAGE_NOT_FOUND, field="key")
        resend(key=key, now=self.now)
        message = Message.objects.filter(pk=key).first()
        if message is None:  # delivered the moment it was re-sent
            raise NotFound(MESSAGE_NOT_FOUND, field="key")
        return Response(message_record(message))


class OutboxPurge(ResourceView):
    queryset = Message.objects.all()  # what this credential may see (ResourceView)

    @documented(
        operation_id="outbox_purge",
        request=None,
        responses={200: MessageRecordSerializer, **errors(400, 401, 403, 404, 409)},
        description="Delete a dead letter or an undeliverable message for good; answers it as "
        "it was. 409 for a message still being delivered (nothing owed is dropped).",
    )
    def post(self, request: Request, key: str) -> Response:
        if not self.get_queryset().filter(pk=key).exists():
            raise NotFound(MESSAGE_NOT_FOUND, field="key")
        return Response(message_record(purge(key=key)))
