"""``/api/django-tasks``: calls enqueued through Django's Tasks framework (``tasks_app.backends``),
as ``TaskResult`` reports them, with re-run and cancel through ``tasks_app.jobs``."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet
from django.tasks import TaskResultStatus
from django_filters import rest_framework as filters
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from resonate_project.core.errors import NotFound
from resonate_project.edges.rest.filters import AtNow
from resonate_project.edges.rest.own import documented
from resonate_project.edges.rest.views import ResourceView, errors
from tasks_app import jobs
from tasks_app.backends import errors_of, status_of, status_q
from tasks_app.models import Job

JOB_NOT_FOUND = "Django task not found"


def job_record(job: Job, now: int) -> dict[str, Any]:
    view = jobs.view_of(job, job.task, job.task.promise, now)
    state = status_of(view)
    record: dict[str, Any] = {
        "id": view.id,
        "function": view.call.path,
        "args": view.call.args,
        "kwargs": view.call.kwargs,
        "backend": view.backend,
        "queue": view.queue,
        "priority": view.priority,
        "status": str(state),
        "attempts": len(view.worker_ids),
        "maxAttempts": job.max_attempts,
        "workerIds": view.worker_ids,
        "errors": [
            {
                "exceptionClassPath": e["exception_class_path"],
                "message": e.get("message", ""),
                "traceback": e.get("traceback", ""),
            }
            for e in errors_of(view)
        ],
        "enqueuedAt": view.enqueued_at,
        "dueAt": view.due_at,
        "startedAt": view.started_at,
        "lastAttemptedAt": view.last_attempted_at,
        "finishedAt": view.finished_at,
    }
    if state == TaskResultStatus.SUCCESSFUL:
        record["returnValue"] = view.value
    return record


class ErrorRecordSerializer(serializers.Serializer):
    exceptionClassPath = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    traceback = serializers.CharField(allow_blank=True)


class JobRecordSerializer(serializers.Serializer):
    """Documents ``job_record``: a ``TaskResult`` (times in ms)."""

    id = serializers.CharField(help_text="the result id, also the promise's and task's id")
    function = serializers.CharField(help_text="the task's module path")
    args = serializers.ListField(child=serializers.JSONField())
    kwargs = serializers.DictField(child=serializers.JSONField())
    backend = serializers.CharField()
    queue = serializers.CharField()
    priority = serializers.IntegerField()
    status = serializers.ChoiceField(choices=TaskResultStatus.values)
    attempts = serializers.IntegerField()
    maxAttempts = serializers.IntegerField()
    workerIds = serializers.ListField(child=serializers.CharField())
    errors = ErrorRecordSerializer(many=True, help_text="one per failed attempt, then why it ended")
    enqueuedAt = serializers.IntegerField()
    dueAt = serializers.IntegerField(help_text="not before: run_after, then the next retry")
    startedAt = serializers.IntegerField(allow_null=True)
    lastAttemptedAt = serializers.IntegerField(allow_null=True)
    finishedAt = serializers.IntegerField(allow_null=True)
    returnValue = serializers.JSONField(required=False, help_text="present when SUCCESSFUL")


class JobFilter(AtNow):
    status = filters.ChoiceFilter(
        choices=[(s, s) for s in TaskResultStatus.values], method="by_status"
    )
    queue = filters.CharFilter()
    function = filters.CharFilter(help_text="the task's module path")

    class Meta:
        model = Job
        fields: list[str] = []

    def by_status(self, qs: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return qs.filter(status_q(value, self.now))


class JobList(ResourceView):
    queryset = Job.objects.select_related("task__promise")
    id_field = "task__promise__id"
    filterset_class = JobFilter

    @documented(
        operation_id="django_tasks_list",
        responses={200: JobRecordSerializer(many=True), **errors(400, 401, 403)},
    )
    def get(self, request: Request) -> Response:
        return self.page(lambda job: job_record(job, self.now))


class JobView(ResourceView):
    queryset = Job.objects.select_related("task__promise")
    act_permission = "tasks_app.act_on_task"  # as the admin's re-run and cancel
    id_field = "task__promise__id"

    def job(self, id: str) -> Job:
        self.allow(id)
        job = self.get_queryset().filter(pk=id).first()
        if job is None:
            raise NotFound(JOB_NOT_FOUND)
        return job


class JobDetail(JobView):
    @documented(
        operation_id="django_tasks_get",
        responses={200: JobRecordSerializer, **errors(400, 401, 403, 404)},
    )
    def get(self, request: Request, id: str) -> Response:
        return Response(job_record(self.job(id), self.now))


class JobCancel(JobView):
    @documented(
        operation_id="django_tasks_cancel",
        request=None,
        responses={200: JobRecordSerializer, **errors(400, 401, 403, 404)},
        description="Settle the promise rejected_canceled: the call reads FAILED with "
        "TaskCanceled; a running attempt is not interrupted, its outcome is refused.",
    )
    def post(self, request: Request, id: str) -> Response:
        self.job(id)
        jobs.job_cancel(id=id, now=self.now)
        return Response(job_record(self.job(id), self.now))


class JobRerun(JobView):
    @documented(
        operation_id="django_tasks_rerun",
        request=None,
        responses={201: JobRecordSerializer, **errors(400, 401, 403, 404)},
        description="Enqueue the same call again under a new result id (answered).",
    )
    def post(self, request: Request, id: str) -> Response:
        self.job(id)
        prefix = id.rsplit("/", 1)[0] + "/" if "/" in id else ""
        new_id = f"{prefix}{uuid.uuid4()}"  # under the same prefix a credential is limited to
        self.allow(new_id)
        jobs.job_rerun(id=id, new_id=new_id, now=self.now)
        return Response(job_record(self.job(new_id), self.now), status=status.HTTP_201_CREATED)
