"""The operator console for tasks: viewed states, leases and retries, halt / continue, and
expiring a stuck lease. See ``resonate_project/edges/admin/kit.py`` for the rules
every console page follows."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from outbox.models import Message
from promises.models import Callback, Promise
from resonate_project.core.protocol import PENDING, viewed_task_state
from resonate_project.edges.admin.kit import (
    EMPTY,
    OperatorAdmin,
    Report,
    TargetGroupFilter,
    cell,
    plural,
    request_now,
    seen_at,
    state_badge,
    when,
)
from resonate_project.edges.admin.runs import promise_state_html
from tasks_app.models import Job, Task, TaskState
from tasks_app.selectors import TASK_STATES, viewed_state_q
from tasks_app.services import expire_lease, task_continue, task_halt


def viewed(t: Task) -> str:
    return viewed_task_state(t, t.promise, seen_at(t))


class ViewedStateFilter(admin.SimpleListFilter):
    title = "state (viewed)"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(s, s) for s in TASK_STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        state = self.value()
        if state not in TASK_STATES:
            return queryset
        return queryset.filter(viewed_state_q(state, request_now(request)))


class LeaseFilter(admin.SimpleListFilter):
    """Acquired tasks whose lease deadline has passed: the lease step will take them back at the
    next tick; one that stays here means the steps are not running."""

    title = "lease"
    parameter_name = "lease"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("held", "held"), ("expired", "past its deadline")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = request_now(request)
        match self.value():
            case "held":
                return queryset.filter(state=TaskState.ACQUIRED, expires_at__gt=now)
            case "expired":
                return queryset.filter(state=TaskState.ACQUIRED, expires_at__lte=now)
        return queryset


class RetryFilter(admin.SimpleListFilter):
    """Pending tasks whose retry time has passed: the retry step dispatches them at the next tick;
    one that stays here means the steps are not running."""

    title = "retry"
    parameter_name = "retry"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("overdue", "past its retry time")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "overdue":
            return queryset.filter(state=TaskState.PENDING, retry_at__lte=request_now(request))
        return queryset


class TaskTargetFilter(TargetGroupFilter):
    field = "promise__target"


@admin.register(Task)
class TaskAdmin(OperatorAdmin[Task]):
    act_permission = "tasks_app.act_on_task"
    list_display = (
        "task_column",
        "state_column",
        "version",
        "pid",
        "lease_column",
        "retry_column",
        "resumes_column",
        "promise_column",
    )
    list_filter = (ViewedStateFilter, LeaseFilter, RetryFilter, TaskTargetFilter)
    search_fields = ("promise__id",)
    search_help_text = "A task id prefix, or a worker pid (exact)."
    ordering = ("promise_id",)
    actions = ("halt_tasks", "continue_tasks", "expire_leases")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "task_view",
                    "state_view",
                    "version",
                    "pid",
                    "ttl_view",
                    "promise_view",
                    "django_task_view",
                )
            },
        ),
        ("Timers", {"fields": ("lease_view", "retry_view")}),
        (
            "Releases",
            {
                "fields": ("release_count", "last_release_view", "last_pid"),
                "description": "From the second task.release without progress (suspended, "
                "resumed, continued) each delays the next execute: "
                "RELEASE_BACKOFF_BASE_MS, doubling up to RELEASE_BACKOFF_MAX_MS.",
            },
        ),
        ("Waiting", {"fields": ("resumes_view", "awaits_view", "execute_view")}),
    )
    readonly_fields = (
        "task_view",
        "state_view",
        "ttl_view",
        "promise_view",
        "lease_view",
        "retry_view",
        "resumes_view",
        "awaits_view",
        "execute_view",
        "django_task_view",
        "release_count",
        "last_release_view",
        "last_pid",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Task]:
        return super().get_queryset(request).select_related("promise")

    def search_q(self, term: str) -> Q:
        return Q(promise__id__startswith=term) | Q(pid=term)

    # --- columns ---

    @admin.display(description="task", ordering="promise_id")
    def task_column(self, t: Task) -> str:
        return t.promise_id

    @admin.display(description="state")
    def state_column(self, t: Task) -> SafeString:
        return state_badge(viewed(t))

    @admin.display(description="lease expires (UTC)", ordering="expires_at")
    def lease_column(self, t: Task) -> SafeString | str:
        return cell(t.expires_at, seen_at(t))

    @admin.display(description="retry at (UTC)", ordering="retry_at")
    def retry_column(self, t: Task) -> SafeString | str:
        return cell(t.retry_at, seen_at(t))

    @admin.display(description="resumes")
    def resumes_column(self, t: Task) -> str:
        return ", ".join(t.resumes) if t.resumes else EMPTY

    @admin.display(description="promise")
    def promise_column(self, t: Task) -> SafeString:
        return format_html("{} {}", self.link(t.promise), promise_state_html(t.promise, seen_at(t)))

    # --- detail ---

    @admin.display(description="task")
    def task_view(self, t: Task) -> str:
        return t.promise_id

    @admin.display(description="state")
    def state_view(self, t: Task) -> SafeString:
        state = viewed(t)
        if state == t.state:
            return state_badge(state)
        return format_html(
            "{} <small>stored {}: its promise is past its deadline, so it reads as fulfilled "
            "until the timeout step writes that</small>",
            state_badge(state),
            t.state,
        )

    @admin.display(description="lease TTL")
    def ttl_view(self, t: Task) -> str:
        return EMPTY if t.ttl is None else f"{t.ttl} ms"

    @admin.display(description="promise")
    def promise_view(self, t: Task) -> SafeString:
        """Its promise, and the run it belongs to as a timeline (where the site has the
        promises' admin)."""
        try:
            run = reverse(
                "admin:promises_promise_run",
                args=[quote(t.promise_id)],
                current_app=self.admin_site.name,
            )
        except NoReverseMatch:
            return self.promise_column(t)
        return format_html(
            '{} · <a class="resonate-run" href="{}">its run, as a timeline</a>',
            self.promise_column(t),
            run,
        )

    @admin.display(description="Django task")
    def django_task_view(self, t: Task) -> SafeString | str:
        j = Job.objects.filter(task_id=t.promise_id).first()
        return EMPTY if j is None else format_html("{} {}", self.link(j, j.function), j.queue)

    @admin.display(description="lease expires")
    def lease_view(self, t: Task) -> SafeString | str:
        return when(t.expires_at, seen_at(t))

    @admin.display(description="retry (next dispatch) at")
    def retry_view(self, t: Task) -> SafeString | str:
        return when(t.retry_at, seen_at(t))

    @admin.display(description="last release")
    def last_release_view(self, t: Task) -> SafeString | str:
        return when(t.last_release_at, seen_at(t))

    @admin.display(description="resumed by")
    def resumes_view(self, t: Task) -> SafeString | str:
        return self.promises_html(list(Promise.objects.filter(id__in=t.resumes)), seen_at(t))

    @admin.display(description="awaits")
    def awaits_view(self, t: Task) -> SafeString | str:
        rows = Callback.objects.filter(awaiter_id=t.promise_id).select_related("awaited")
        return self.promises_html([cb.awaited for cb in rows], seen_at(t))

    @admin.display(description="execute message in the outbox")
    def execute_view(self, t: Task) -> SafeString | str:
        m = Message.objects.filter(key=t.promise_id, kind="execute").first()
        if m is None:
            return EMPTY
        return format_html(
            "{} version {} to {}, attempts {}",
            self.link(m, "execute"),
            m.version,
            m.address,
            m.attempts,
        )

    def promises_html(self, promises: list[Promise], now: int) -> SafeString | str:
        if not promises:
            return EMPTY
        rows = ((self.link(p), promise_state_html(p, now)) for p in sorted(promises, key=str))
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{} {}</li>", rows))

    # --- actions ---

    def object_actions(self, request: HttpRequest, obj: Task) -> list[tuple[str, str]]:
        state = viewed(obj)
        actions = []
        if state not in (TaskState.HALTED, TaskState.FULFILLED):
            actions.append(("halt_tasks", "Halt"))
        if state == TaskState.HALTED:
            actions.append(("continue_tasks", "Continue"))
        if obj.state == TaskState.ACQUIRED:
            actions.append(("expire_leases", "Expire lease now…"))
        return actions

    @admin.action(description="Halt selected tasks", permissions=["act"])
    def halt_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
        """``task.halt``: out of circulation until continued; a holder's next fenced request is
        refused (the task is no longer acquired)."""
        tasks = self.selected(queryset)
        if self.too_many(request, tasks):
            return None

        def act(t: Task, now: int, report: Report) -> None:
            was = viewed(t)
            task_halt(id=t.promise_id, now=now)
            if was == TaskState.HALTED:
                report.nothing(t, "already halted")
            else:
                report.changed(t, f"halted (was {was})")

        self.run_each(request, tasks, "Halt", act)
        return self.after(request, tasks)

    @admin.action(description="Continue selected tasks", permissions=["act"])
    def continue_tasks(self, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
        """``task.continue``: a halted task goes back to pending and is dispatched at once."""
        tasks = self.selected(queryset)
        if self.too_many(request, tasks):
            return None

        def act(t: Task, now: int, report: Report) -> None:
            task_continue(id=t.promise_id, now=now)
            report.changed(t, "continued: pending, dispatched")

        self.run_each(request, tasks, "Continue", act)
        return self.after(request, tasks)

    @admin.action(description="Expire the lease of selected tasks now…", permissions=["act"])
    def expire_leases(self, request: HttpRequest, queryset: QuerySet[Task]) -> HttpResponse | None:
        """Lease expiry (R5) now: the task is dispatched again at the same version, and the holder
        is fenced out; a task whose promise is past its deadline is timed out instead."""
        tasks = self.selected(queryset)
        if self.too_many(request, tasks):
            return None
        if "apply" not in request.POST:
            return self.confirmation(
                request,
                tasks,
                action="expire_leases",
                title=f"Expire the lease of {plural(len(tasks), 'task')} now",
                submit="Expire lease now",
                describe=lambda t: format_html(
                    "{} held by {} until {}",
                    state_badge(viewed(t)),
                    t.pid or EMPTY,
                    when(t.expires_at, seen_at(t)),
                ),
                warning="The holder keeps running but every request it makes for this version "
                "is refused from now on; the task is offered to workers again.",
            )

        def act(t: Task, now: int, report: Report) -> None:
            task, promise = expire_lease(id=t.promise_id, now=now)
            if promise["state"] != PENDING:
                report.changed(
                    t,
                    f"its promise was past its deadline: timed out as "
                    f"{promise['state']}, task fulfilled",
                )
            else:
                version = task["version"]
                report.changed(t, f"lease expired (was {t.pid}): pending at version {version}")

        self.run_each(request, tasks, "Expire lease", act)
        return self.after(request, tasks)
