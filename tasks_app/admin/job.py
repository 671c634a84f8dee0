"""The operator console for Django tasks (``tasks_app.backends``): each enqueued call, its status,
its attempts and their errors, cancel and re-run. See ``resonate_project/edges/admin/kit.py`` for
the rules every console page follows."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.tasks import TaskResultStatus
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from resonate_project.core.protocol import PENDING
from resonate_project.edges.admin.kit import (
    EMPTY,
    OperatorAdmin,
    Report,
    cell,
    plural,
    pretty_json,
    request_now,
    seen_at,
    state_badge,
    when,
)
from tasks_app import jobs
from tasks_app.backends import errors_of, status_of, status_q, trace
from tasks_app.models import Job


def job_view(j: Job) -> jobs.JobView:
    return jobs.view_of(j, j.task, j.task.promise, seen_at(j))


class JobStatusFilter(admin.SimpleListFilter):
    """``TaskResult.status``, from the projected promise and the viewed task (as get_result)."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(s.value, s.label) for s in TaskResultStatus]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in TaskResultStatus.values:
            return queryset
        return queryset.filter(status_q(str(self.value()), request_now(request)))


def pre(text: str) -> SafeString:
    return format_html("<pre>{}</pre>", text)


@admin.register(Job)
class JobAdmin(OperatorAdmin[Job]):
    """Calls enqueued through Django's Tasks framework, shown as ``TaskResult`` shows them: the
    function and its arguments, status, attempts, and the return value or each attempt's
    traceback. Re-run and cancel go through ``tasks_app.jobs``."""

    act_permission = "tasks_app.act_on_task"
    list_display = (
        "id_column",
        "function",
        "status_column",
        "queue",
        "priority",
        "attempts_column",
        "enqueued_column",
        "finished_column",
    )
    list_filter = (JobStatusFilter, "queue", "backend")
    search_help_text = "A result id prefix, or a task's module path (exact)."
    ordering = ("-enqueued_at",)
    actions = ("rerun_jobs", "cancel_jobs")
    fieldsets = (
        (None, {"fields": ("id_view", "function", "call_view", "status_view", "links_view")}),
        ("Outcome", {"fields": ("value_view", "errors_view")}),
        (
            "Attempts",
            {
                "fields": (
                    "attempts_view",
                    "worker_ids_view",
                    "times_view",
                    "queue",
                    "priority",
                    "backend",
                )
            },
        ),
    )
    readonly_fields = (
        "id_view",
        "function",
        "call_view",
        "status_view",
        "links_view",
        "value_view",
        "errors_view",
        "attempts_view",
        "worker_ids_view",
        "times_view",
        "queue",
        "priority",
        "backend",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).select_related("task__promise")

    def search_q(self, term: str) -> Q:
        return Q(task__promise__id__startswith=term) | Q(function=term)

    # --- columns ---

    @admin.display(description="result id", ordering="task_id")
    def id_column(self, j: Job) -> str:
        return j.task_id

    @admin.display(description="status")
    def status_column(self, j: Job) -> SafeString:
        return state_badge(str(status_of(job_view(j))))

    @admin.display(description="attempts")
    def attempts_column(self, j: Job) -> str:
        return f"{len(j.worker_ids)} / {j.max_attempts}"

    @admin.display(description="enqueued (UTC)", ordering="enqueued_at")
    def enqueued_column(self, j: Job) -> SafeString | str:
        return cell(j.enqueued_at, seen_at(j))

    @admin.display(description="finished (UTC)")
    def finished_column(self, j: Job) -> SafeString | str:
        return cell(job_view(j).finished_at, seen_at(j))

    # --- detail ---

    @admin.display(description="result id")
    def id_view(self, j: Job) -> str:
        return j.task_id

    @admin.display(description="call")
    def call_view(self, j: Job) -> SafeString:
        call = job_view(j).call
        return pretty_json({"args": call.args, "kwargs": call.kwargs})

    @admin.display(description="status")
    def status_view(self, j: Job) -> SafeString:
        view = job_view(j)
        return format_html(
            "{} <small>promise {}, task {} (version {})</small>",
            state_badge(str(status_of(view))),
            view.promise_state,
            view.task_state,
            view.version,
        )

    @admin.display(description="promise and task")
    def links_view(self, j: Job) -> SafeString:
        return format_html(
            "{} · {}", self.link(j.task.promise, "promise"), self.link(j.task, "task")
        )

    @admin.display(description="return value")
    def value_view(self, j: Job) -> SafeString | str:
        view = job_view(j)
        return pretty_json(view.value) if view.promise_state == "resolved" else EMPTY

    @admin.display(description="errors (one per failed attempt)")
    def errors_view(self, j: Job) -> SafeString | str:
        errors = errors_of(job_view(j))
        if not errors:
            return EMPTY
        rows = ((e["exception_class_path"], pre(trace(e))) for e in errors)
        return format_html("<ol>{}</ol>", format_html_join("", "<li>{}{}</li>", rows))

    @admin.display(description="attempts")
    def attempts_view(self, j: Job) -> str:
        return f"{len(j.worker_ids)} of at most {j.max_attempts}"

    @admin.display(description="workers")
    def worker_ids_view(self, j: Job) -> str:
        return ", ".join(j.worker_ids) or EMPTY

    @admin.display(description="times")
    def times_view(self, j: Job) -> SafeString:
        view, now = job_view(j), seen_at(j)
        rows = (
            ("enqueued", when(view.enqueued_at, now)),
            ("due (run_after, retry)", when(view.due_at, now)),
            ("started", when(view.started_at, now)),
            ("last attempted", when(view.last_attempted_at, now)),
            ("finished", when(view.finished_at, now)),
        )
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{}: {}</li>", rows))

    # --- actions ---

    def object_actions(self, request: HttpRequest, obj: Job) -> list[tuple[str, str]]:
        actions = [("rerun_jobs", "Re-run")]
        if job_view(obj).promise_state == PENDING:
            actions.append(("cancel_jobs", "Cancel…"))
        return actions

    @admin.action(description="Re-run selected Django tasks", permissions=["act"])
    def rerun_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        """The same call enqueued again under a new result id (a settled promise is final)."""
        selected = self.selected(queryset)
        if self.too_many(request, selected):
            return None

        def act(j: Job, now: int, report: Report) -> None:
            new_id = str(uuid.uuid4())
            jobs.job_rerun(id=j.task_id, new_id=new_id, now=now)
            report.changed(j, f"enqueued again as {new_id}")

        self.run_each(request, selected, "Re-run", act)
        return self.after(request, selected)

    @admin.action(description="Cancel selected Django tasks…", permissions=["act"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        """Settle the promise ``rejected_canceled``: the call fails with ``TaskCanceled``."""
        selected = self.selected(queryset)
        if self.too_many(request, selected):
            return None
        if "apply" not in request.POST:
            return self.confirmation(
                request,
                selected,
                action="cancel_jobs",
                title=f"Cancel {plural(len(selected), 'Django task')}",
                submit="Cancel",
                describe=lambda j: format_html(
                    "{} {}", j.function, state_badge(str(status_of(job_view(j))))
                ),
                warning="A running attempt is not interrupted; its outcome is refused when it "
                "reports, and the call reads as failed with TaskCanceled.",
            )

        def act(j: Job, now: int, report: Report) -> None:
            if job_view(j).promise_state != PENDING:
                report.nothing(j, "already finished")
                return
            jobs.job_cancel(id=j.task_id, now=now)
            report.changed(j, "canceled")

        self.run_each(request, selected, "Cancel", act)
        return self.after(request, selected)
