"""The operator console for schedules: cron in words, the next fire times, the occurrences, and
fire now / delete. See ``resonate_project/adminkit.py`` for the rules every console page follows."""

from __future__ import annotations

from typing import Any

from cron_descriptor import Options, get_description
from django.contrib import admin
from django.contrib.admin.models import DELETION
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from promises.models import Promise
from promises.selectors import schedule_promises
from resonate_project.adminkit import (
    EMPTY,
    OperatorAdmin,
    Report,
    cell,
    changelist_url,
    decoded,
    duration,
    plural,
    pretty_json,
    promise_state_html,
    request_now,
    seen_at,
    when,
)
from resonate_project.core import cron
from resonate_project.core.tags import SCHEDULE
from schedules.models import Schedule
from schedules.services import fire_now, schedule_delete

UPCOMING = 5  # fire times shown on the detail page
OCCURRENCES = 20  # newest occurrences shown on the detail page


def cron_words(expr: str) -> str:
    """``0 9 * * 1-5`` → ``At 09:00, Monday through Friday (UTC)``; our dialect is standard cron
    (0 = Sunday), with an optional seconds field first, as cron-descriptor reads it."""
    options = Options()
    options.use_24hour_time_format = True
    try:
        return f"{get_description(expr, options)} (UTC)"
    except Exception:  # cron-descriptor raises assorted errors; the raw expression is shown anyway
        return EMPTY


def upcoming(s: Schedule, count: int) -> list[int]:
    """``next_run_at`` and the fire times after it."""
    times = [s.next_run_at]
    while len(times) < count:
        try:
            times.append(cron.next_after(s.cron, times[-1]))
        except cron.NoNextRun:  # none before the end of year 9999
            break
    return times


class DueFilter(admin.SimpleListFilter):
    """Schedules whose next run has passed: the schedule step fires them at the next tick; one
    that stays here means the steps are not running."""

    title = "next run"
    parameter_name = "due"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("overdue", "past, not fired yet")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "overdue":
            return queryset.filter(next_run_at__lte=request_now(request))
        return queryset


@admin.register(Schedule)
class ScheduleAdmin(OperatorAdmin[Schedule]):
    act_permission = "schedules.act_on_schedule"
    list_display = ("id", "cron", "words_column", "next_column", "last_column", "promise_id")
    list_filter = (DueFilter,)
    search_fields = ("id",)
    search_help_text = "A schedule id prefix."
    ordering = ("id",)
    actions = ("fire_schedules", "delete_schedules")
    fieldsets = (
        (None, {"fields": ("id", "cron", "words_view", "created_view")}),
        ("Runs", {"fields": ("upcoming_view", "last_view", "occurrences_view")}),
        (
            "Each occurrence",
            {"fields": ("promise_id", "timeout_view", "param_view", "tags_view")},
        ),
    )
    readonly_fields = (
        "words_view",
        "created_view",
        "upcoming_view",
        "last_view",
        "occurrences_view",
        "timeout_view",
        "param_view",
        "tags_view",
    )

    # --- columns ---

    @admin.display(description="in words")
    def words_column(self, s: Schedule) -> str:
        return cron_words(s.cron)

    @admin.display(description="next run (UTC)", ordering="next_run_at")
    def next_column(self, s: Schedule) -> SafeString | str:
        return cell(s.next_run_at, seen_at(s))

    @admin.display(description="last run (UTC)", ordering="last_run_at")
    def last_column(self, s: Schedule) -> SafeString | str:
        return cell(s.last_run_at, seen_at(s))

    # --- detail ---

    @admin.display(description="in words")
    def words_view(self, s: Schedule) -> str:
        return cron_words(s.cron)

    @admin.display(description="created")
    def created_view(self, s: Schedule) -> SafeString | str:
        return when(s.created_at, seen_at(s))

    @admin.display(description="next fire times")
    def upcoming_view(self, s: Schedule) -> SafeString:
        now = seen_at(s)
        times = upcoming(s, UPCOMING)
        items = format_html_join("", "<li>{}</li>", ((when(t, now),) for t in times))
        note = (
            mark_safe(
                "<p>The first is already due: the schedule step fires it (and any it missed) at "
                "its next tick.</p>"
            )
            if s.next_run_at <= now
            else ""
        )
        return format_html("<ol>{}</ol>{}", items, note)

    @admin.display(description="last run")
    def last_view(self, s: Schedule) -> SafeString | str:
        return when(s.last_run_at, seen_at(s))

    @admin.display(description="occurrences (newest first)")
    def occurrences_view(self, s: Schedule) -> SafeString | str:
        now = seen_at(s)
        promises = schedule_promises(s.id, OCCURRENCES)
        if not promises:
            return EMPTY
        rows = (
            (self.link(p), promise_state_html(p, now), when(p.created_at, now)) for p in promises
        )
        return format_html(
            '<ul>{}</ul><p><a href="{}">All promises of this schedule</a></p>',
            format_html_join("", "<li>{} {} created {}</li>", rows),
            changelist_url(Promise, self.admin_site.name, q=f"{SCHEDULE}={s.id}"),
        )

    @admin.display(description="timeout after firing")
    def timeout_view(self, s: Schedule) -> str:
        return f"{duration(s.promise_timeout)} ({s.promise_timeout} ms)"

    @admin.display(description="param")
    def param_view(self, s: Schedule) -> SafeString | str:
        return decoded(s.promise_param_headers, s.promise_param_data)

    @admin.display(description="tags")
    def tags_view(self, s: Schedule) -> SafeString:
        return pretty_json(s.promise_tags)

    # --- actions ---

    def object_actions(self, request: HttpRequest, obj: Schedule) -> list[tuple[str, str]]:
        return [("fire_schedules", "Fire now"), ("delete_schedules", "Delete…")]

    @admin.action(description="Fire selected schedules now", permissions=["act"])
    def fire_schedules(
        self, request: HttpRequest, queryset: QuerySet[Schedule]
    ) -> HttpResponse | None:
        """One extra occurrence now, created as the schedule step creates one; the regular
        cadence (``next_run_at``) is unchanged."""
        schedules = self.selected(queryset)
        if self.too_many(request, schedules):
            return None

        def act(s: Schedule, now: int, report: Report) -> None:
            promise, created = fire_now(id=s.id, now=now)
            if created:
                report.changed(s, f"fired: created {promise['id']}")
            else:
                report.nothing(s, f"occurrence {promise['id']} already exists")

        self.run_each(request, schedules, "Fire now", act)
        return self.after(request, schedules)

    @admin.action(description="Delete selected schedules…", permissions=["act"])
    def delete_schedules(
        self, request: HttpRequest, queryset: QuerySet[Schedule]
    ) -> HttpResponse | None:
        """``schedule.delete``: no further occurrences; those already created are left alone."""
        schedules = self.selected(queryset)
        if self.too_many(request, schedules):
            return None
        if "apply" not in request.POST:
            return self.confirmation(
                request,
                schedules,
                action="delete_schedules",
                title=f"Delete {plural(len(schedules), 'schedule')}",
                submit="Delete",
                describe=lambda s: format_html("{} — {}", s.cron, cron_words(s.cron)),
                warning="No further occurrences are created. Occurrences already created, and "
                "their tasks, are not touched.",
            )

        def act(s: Schedule, now: int, report: Report) -> None:
            schedule_delete(id=s.id, now=now)
            report.changed(s, "deleted", flag=DELETION)

        self.run_each(request, schedules, "Delete", act)
        return self.after(request, schedules)
