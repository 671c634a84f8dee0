"""Resource views: they parse, call, and render. Reads are queries over the stored rows served as
the protocol's projected records; writes call the protocol handlers through
``resonate_project.envelope.call``. The clock is read once per request, in ``initial``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.generics import GenericAPIView
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from promises.models import Promise
from resonate_project import envelope
from resonate_project.core.clock import now_ms
from resonate_project.core.protocol import promise_record, task_record
from resonate_project.core.schedules import schedule_record
from resonate_project.rest.auth import ApiAccess, BearerTokenAuthentication, principal_of
from resonate_project.rest.errors import ProtocolError, field_of
from resonate_project.rest.filters import FilterBackend, PromiseFilter, ScheduleFilter, TaskFilter
from resonate_project.rest.pagination import IdCursorPagination
from resonate_project.rest.parsers import DepthLimitedJSONParser
from resonate_project.rest.serializers import (
    ErrorSerializer,
    PromiseCreateSerializer,
    PromiseRecordSerializer,
    PromiseSettleSerializer,
    ScheduleCreateSerializer,
    ScheduleRecordSerializer,
    TaskRecordSerializer,
)
from schedules.models import Schedule
from tasks_app.models import Task


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    described = {
        400: "invalid request (the field is named)",
        401: "credential missing or invalid (only when RESONATE_AUTH=required)",
        403: "not allowed for this credential (only when RESONATE_AUTH=required)",
        404: "not found",
        409: "refused in the object's current state",
    }
    return {c: OpenApiResponse(ErrorSerializer, description=described[c]) for c in codes}


class ResourceView(GenericAPIView):
    authentication_classes = [BearerTokenAuthentication, SessionAuthentication]
    permission_classes = [ApiAccess]
    parser_classes = [DepthLimitedJSONParser]
    renderer_classes = [JSONRenderer]
    pagination_class = IdCursorPagination
    filter_backends = [FilterBackend]
    now = 0
    id_field = "pk"  # the column holding the protocol id

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.now = now_ms()  # the one clock read of this request
        super().initial(request, *args, **kwargs)

    def call(self, kind: str, data: dict[str, Any], fields: Iterable[str] = ()) -> Any:
        """Run one request kind exactly as ``POST /`` does; a refusal becomes the error reply."""
        res = envelope.call(kind, data, self.now, principal_of(self.request))
        if not res.ok:
            message = str(res.data)
            raise ProtocolError(res.status, message, field_of(message, fields))
        return res.data

    def get_queryset(self) -> QuerySet[Any]:
        """Only ids under a prefix-limited credential's prefix (as a search through POST /)."""
        qs = super().get_queryset()
        principal = principal_of(self.request)
        if principal is not None and not principal.admin and principal.prefix:
            qs = qs.filter(**{f"{self.id_field}__startswith": principal.prefix})
        return qs

    def page(self, record: Callable[[Any], dict[str, Any]]) -> Response:
        rows = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        assert rows is not None  # pagination is always on
        assert isinstance(self.paginator, IdCursorPagination)
        return self.get_paginated_response(self.paginator.fit(record))


def valid(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.data)
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


# --- promises ---------------------------------------------------------------------------------


class PromiseList(ResourceView):
    queryset = Promise.objects.all()
    filterset_class = PromiseFilter

    @extend_schema(
        operation_id="promises_list",
        responses={200: PromiseRecordSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return self.page(lambda p: promise_record(p, self.now))

    @extend_schema(
        operation_id="promises_create",
        request=PromiseCreateSerializer,
        responses={200: PromiseRecordSerializer, **errors(400, 401, 403)},
        description="Idempotent by id (promise.create): answers 200 with the promise as it "
        "stands, whether this request created it or it existed already. A resonate:target tag "
        "also creates its task.",
    )
    def post(self, request: Request) -> Response:
        data = valid(PromiseCreateSerializer, request)
        return Response(self.call("promise.create", data, data)["promise"])


class PromiseDetail(ResourceView):
    @extend_schema(
        operation_id="promises_get",
        responses={200: PromiseRecordSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, id: str) -> Response:
        return Response(self.call("promise.get", {"id": id}, ["id"])["promise"])


class PromiseSettle(ResourceView):
    @extend_schema(
        operation_id="promises_settle",
        request=PromiseSettleSerializer,
        responses={200: PromiseRecordSerializer, **errors(400, 401, 403, 404)},
        description="promise.settle: the first verdict wins; a later one, or one after the "
        "deadline, answers 200 with the record as it stands.",
    )
    def post(self, request: Request, id: str) -> Response:
        data = {"id": id, **valid(PromiseSettleSerializer, request)}
        return Response(self.call("promise.settle", data, data)["promise"])


# --- tasks ------------------------------------------------------------------------------------


class TaskList(ResourceView):
    queryset = Task.objects.select_related("promise")
    id_field = "promise__id"
    filterset_class = TaskFilter

    @extend_schema(
        operation_id="tasks_list",
        responses={200: TaskRecordSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return self.page(lambda t: task_record(t, t.promise, self.now))


class TaskDetail(ResourceView):
    @extend_schema(
        operation_id="tasks_get",
        responses={200: TaskRecordSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, id: str) -> Response:
        return Response(self.call("task.get", {"id": id}, ["id"])["task"])


class TaskAction(ResourceView):
    """``task.halt`` / ``task.continue``; answers with the task as read right after."""

    kind = ""

    def post(self, request: Request, id: str) -> Response:
        self.call(self.kind, {"id": id}, ["id"])
        return Response(self.call("task.get", {"id": id}, ["id"])["task"])


ACTION_RESPONSES = {200: TaskRecordSerializer, **errors(400, 401, 403, 404, 409)}


class TaskHalt(TaskAction):
    kind = "task.halt"

    @extend_schema(
        operation_id="tasks_halt",
        request=None,
        responses=ACTION_RESPONSES,
        description="task.halt: 409 once the task is fulfilled.",
    )
    def post(self, request: Request, id: str) -> Response:
        return super().post(request, id)


class TaskContinue(TaskAction):
    kind = "task.continue"

    @extend_schema(
        operation_id="tasks_continue",
        request=None,
        responses=ACTION_RESPONSES,
        description="task.continue: a halted task becomes pending and is dispatched; 409 "
        "unless halted with a pending promise.",
    )
    def post(self, request: Request, id: str) -> Response:
        return super().post(request, id)


# --- schedules --------------------------------------------------------------------------------


class ScheduleList(ResourceView):
    queryset = Schedule.objects.all()
    filterset_class = ScheduleFilter

    @extend_schema(
        operation_id="schedules_list",
        responses={200: ScheduleRecordSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return self.page(schedule_record)

    @extend_schema(
        operation_id="schedules_create",
        request=ScheduleCreateSerializer,
        responses={200: ScheduleRecordSerializer, **errors(400, 401, 403)},
        description="Idempotent by id (schedule.create): 200 with the schedule as it stands.",
    )
    def post(self, request: Request) -> Response:
        data = valid(ScheduleCreateSerializer, request)
        return Response(self.call("schedule.create", data, data)["schedule"])


class ScheduleDetail(ResourceView):
    @extend_schema(
        operation_id="schedules_get",
        responses={200: ScheduleRecordSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, id: str) -> Response:
        return Response(self.call("schedule.get", {"id": id}, ["id"])["schedule"])

    @extend_schema(
        operation_id="schedules_delete",
        responses={204: None, **errors(400, 401, 403, 404)},
        description="schedule.delete: occurrences already created are left alone.",
    )
    def delete(self, request: Request, id: str) -> Response:
        self.call("schedule.delete", {"id": id}, ["id"])
        return Response(status=status.HTTP_204_NO_CONTENT)
