"""Resource views: they parse, call, and render. Lists are queries over the stored rows served as
the protocol's projected records; everything else calls the typed services (a refusal raises
``core.errors.ProtocolError``, which ``rest.errors`` renders with its field). The clock is read
once per request, in ``initial``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.metadata import SimpleMetadata
from rest_framework.request import Request
from rest_framework.response import Response

from promises import services as promises
from promises.models import Promise
from resonate_project.access.rules import check_names, check_writes
from resonate_project.core.clock import now_ms
from resonate_project.core.protocol import promise_record, task_record
from resonate_project.core.schedules import schedule_record
from resonate_project.edges.rest.auth import principal_of
from resonate_project.edges.rest.filters import (
    FilterBackend,
    PromiseFilter,
    ScheduleFilter,
    TaskFilter,
)
from resonate_project.edges.rest.own import OwnSettings, documented
from resonate_project.edges.rest.pagination import IdCursorPagination
from resonate_project.edges.rest.serializers import (
    ErrorSerializer,
    PromiseCreateSerializer,
    PromiseRecordSerializer,
    PromiseSettleSerializer,
    ScheduleCreateSerializer,
    ScheduleRecordSerializer,
    TaskRecordSerializer,
)
from resonate_project.engine import scope
from schedules import services as schedules
from schedules.models import Schedule
from tasks_app import services as tasks
from tasks_app.models import Task
from tasks_app.selectors import release_fields, task_release_fields


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    described = {
        400: "invalid request (the field is named)",
        401: "credential missing or invalid (only when RESONATE_AUTH=required)",
        403: "not allowed for this credential (only when RESONATE_AUTH=required)",
        404: "not found",
        409: "refused in the object's current state",
    }
    return {c: OpenApiResponse(ErrorSerializer, description=described[c]) for c in codes}


class Metadata(SimpleMetadata):
    """``OPTIONS``: the view's name, description, renderers and parsers, without DRF's
    ``actions``: it builds those from a ``serializer_class``, which these views do not have (each
    method names its own; ``/api/schema/`` describes every request body), so asking was a 500."""

    def determine_actions(self, request: Request, view: Any) -> dict[str, Any]:
        return {}


class ResourceView(OwnSettings, GenericAPIView):
    metadata_class = Metadata
    pagination_class = IdCursorPagination
    filter_backends = [FilterBackend]
    now = 0
    id_field = "pk"  # the column holding the protocol id

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.now = now_ms()  # the one clock read of this request
        super().initial(request, *args, **kwargs)

    def allow(self, *ids: str, tags: dict[str, str] | None = None) -> None:
        """The ids a request names, and the id tags and target it would store, must be the
        credential's own (``access.rules``, as through ``POST /``)."""
        principal = principal_of(self.request)
        check_names(principal, ids)
        check_writes(principal, [tags or {}], ())

    def get_queryset(self) -> QuerySet[Any]:
        """Only ids a prefix-limited credential may see (``engine.scope``, as through POST /)."""
        return scope.visible(super().get_queryset(), self.id_field, principal_of(self.request))

    def page(self, record: Callable[[Any], Mapping[str, Any]]) -> Response:
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

    @documented(
        operation_id="promises_list",
        responses={200: PromiseRecordSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return self.page(lambda p: promise_record(p, self.now))

    @documented(
        operation_id="promises_create",
        request=PromiseCreateSerializer,
        responses={200: PromiseRecordSerializer, **errors(400, 401, 403)},
        description="Idempotent by id (promise.create): answers 200 with the promise as it "
        "stands, whether this request created it or it existed already. A resonate:target tag "
        "also creates its task.",
    )
    def post(self, request: Request) -> Response:
        data = valid(PromiseCreateSerializer, request)
        self.allow(data["id"], tags=data.get("tags"))
        return Response(
            promises.promise_create(
                id=data["id"],
                timeout_at=data["timeoutAt"],
                param=data.get("param"),
                tags=data.get("tags"),
                now=self.now,
            )
        )


class PromiseDetail(ResourceView):
    permission_model = Promise  # what a staff session needs permissions on

    @documented(
        operation_id="promises_get",
        responses={200: PromiseRecordSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, id: str) -> Response:
        self.allow(id)
        return Response(promises.promise_get(id=id, now=self.now))


class PromiseSettle(ResourceView):
    permission_model = Promise  # what a staff session needs permissions on

    @documented(
        operation_id="promises_settle",
        request=PromiseSettleSerializer,
        responses={200: PromiseRecordSerializer, **errors(400, 401, 403, 404)},
        description="promise.settle: the first verdict wins; a later one, or one after the "
        "deadline, answers 200 with the record as it stands.",
    )
    def post(self, request: Request, id: str) -> Response:
        data = valid(PromiseSettleSerializer, request)
        self.allow(id)
        return Response(
            promises.promise_settle(
                id=id, state=data["state"], value=data.get("value"), now=self.now
            )
        )


# --- tasks ------------------------------------------------------------------------------------


class TaskList(ResourceView):
    queryset = Task.objects.select_related("promise")
    id_field = "promise__id"
    filterset_class = TaskFilter

    @documented(
        operation_id="tasks_list",
        responses={200: TaskRecordSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return self.page(lambda t: {**task_record(t, t.promise, self.now), **release_fields(t)})


class TaskDetail(ResourceView):
    permission_model = Task  # what a staff session needs permissions on

    @documented(
        operation_id="tasks_get",
        responses={200: TaskRecordSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, id: str) -> Response:
        self.allow(id)
        return Response({**tasks.task_get(id=id, now=self.now), **task_release_fields(id)})


class TaskAction(ResourceView):
    permission_model = Task  # what a staff session needs permissions on
    """``task.halt`` / ``task.continue``; answers with the task as read right after."""

    action: Callable[..., None] = staticmethod(tasks.task_halt)

    def post(self, request: Request, id: str) -> Response:
        self.allow(id)
        type(self).action(id=id, now=self.now)
        return Response({**tasks.task_get(id=id, now=self.now), **task_release_fields(id)})


ACTION_RESPONSES = {200: TaskRecordSerializer, **errors(400, 401, 403, 404, 409)}


class TaskHalt(TaskAction):
    action = staticmethod(tasks.task_halt)

    @documented(
        operation_id="tasks_halt",
        request=None,
        responses=ACTION_RESPONSES,
        description="task.halt: 409 once the task is fulfilled.",
    )
    def post(self, request: Request, id: str) -> Response:
        return super().post(request, id)


class TaskContinue(TaskAction):
    action = staticmethod(tasks.task_continue)

    @documented(
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

    @documented(
        operation_id="schedules_list",
        responses={200: ScheduleRecordSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return self.page(schedule_record)

    @documented(
        operation_id="schedules_create",
        request=ScheduleCreateSerializer,
        responses={200: ScheduleRecordSerializer, **errors(400, 401, 403)},
        description="Idempotent by id (schedule.create): 200 with the schedule as it stands.",
    )
    def post(self, request: Request) -> Response:
        data = valid(ScheduleCreateSerializer, request)
        self.allow(data["id"], data["promiseId"], tags=data.get("promiseTags"))
        return Response(
            schedules.schedule_create(
                id=data["id"],
                cron=data["cron"],
                promise_id=data["promiseId"],
                promise_timeout=data["promiseTimeout"],
                promise_param=data.get("promiseParam"),
                promise_tags=data.get("promiseTags"),
                now=self.now,
            )
        )


class ScheduleDetail(ResourceView):
    permission_model = Schedule  # what a staff session needs permissions on

    @documented(
        operation_id="schedules_get",
        responses={200: ScheduleRecordSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, id: str) -> Response:
        self.allow(id)
        return Response(schedules.schedule_get(id=id, now=self.now))

    @documented(
        operation_id="schedules_delete",
        responses={204: None, **errors(400, 401, 403, 404)},
        description="schedule.delete: occurrences already created are left alone.",
    )
    def delete(self, request: Request, id: str) -> Response:
        self.allow(id)
        schedules.schedule_delete(id=id, now=self.now)
        return Response(status=status.HTTP_204_NO_CONTENT)
