"""The operator console for schedules: cron in words, the next fire times, the occurrences, and
fire now / delete. See ``resonate_project/edges/admin/kit.py`` for the rules every console page
follows."""

from __future__ import annotations

import json
from typing import Any

from cron_descriptor import Options, get_description
from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import DELETION
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from promises.models import Promise
from promises.selectors import schedule_promises
from resonate_project.core import cron
from resonate_project.core.clock import now_ms
from resonate_project.core.errors import ProtocolError
from resonate_project.core.present import decoded_text
from resonate_project.core.tags import SCHEDULE, TARGET
from resonate_project.edges.admin.kit import (
    EMPTY,
    OperatorAdmin,
    Report,
    cell,
    changelist_url,
    decoded,
    duration,
    encoded_value,
    plural,
    pretty_json,
    request_now,
    seen_at,
    when,
)
from resonate_project.edges.admin.runs import promise_state_html
from schedules.models import Schedule
from schedules.services import (
    fire_now,
    schedule_create,
    schedule_delete,
    schedule_preview,
    schedule_replace,
)

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


# ProtocolError.field (the wire's name) → the form field it is about.
FORM_FIELDS = {
    "id": "id",
    "cron": "cron",
    "promiseId": "promise_id",
    "promiseTimeout": "promise_timeout",
    "promiseParam": "param",
    "promiseTags": "tags",
}


class ScheduleForm(forms.ModelForm):
    """Add or edit a schedule. Nothing is saved by the form: ``clean`` asks the schedule handlers'
    own checks (``services.schedule_preview``) and keeps the next fire times it answers; the
    admin then calls ``schedule_create`` or ``schedule_replace``."""

    target = forms.CharField(
        label="target",
        initial="poll://any@default",
        help_text="resonate:target of each occurrence: poll://any@<group> reaches the SDK "
        "workers of that group, an http(s) URL a push endpoint.",
    )
    param = forms.CharField(
        label="param",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="Each occurrence's param data (UTF-8, base64-encoded). The SDKs run "
        '{"func": "<registered name>", "args": [...], "version": 1}.',
    )
    tags = forms.CharField(
        label="more tags",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="A JSON object of further tags for each occurrence (optional).",
    )

    class Meta:
        model = Schedule
        fields = ("id", "cron", "promise_id", "promise_timeout")
        labels = {"promise_timeout": "timeout after firing (ms)"}
        help_texts = {
            "cron": "5 fields (minute hour day month weekday, UTC) or 6 with seconds first.",
            "promise_id": "The id of each occurrence: {{.id}} and {{.timestamp}} expand.",
        }

    def __init__(self, *args: Any, now: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.now = now
        self.preview: list[int] = []
        s = self.instance
        if not self.is_bound and s.pk:
            tags = dict(s.promise_tags)
            self.initial["target"] = tags.pop(TARGET, "")
            self.initial["tags"] = json.dumps(tags) if tags else ""
            self.initial["param"] = decoded_text(s.promise_param_data) or ""
        elif not self.is_bound:
            self.initial.setdefault("promise_id", "{{.id}}.{{.timestamp}}")
            self.initial.setdefault("promise_timeout", 3_600_000)

    def clean_tags(self) -> dict[str, str]:
        text = self.cleaned_data.get("tags", "").strip()
        if not text:
            return {}
        try:
            tags = json.loads(text)
        except ValueError:
            raise forms.ValidationError("not JSON: a JSON object of strings") from None
        if not isinstance(tags, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in tags.items()
        ):
            raise forms.ValidationError('a JSON object of strings, like {"team": "ops"}')
        return tags

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        tags = {**data.get("tags", {}), TARGET: data["target"]}
        try:
            self.preview = schedule_preview(
                id=self.instance.pk or data["id"],
                cron=data["cron"],
                promise_id=data["promise_id"],
                promise_timeout=data["promise_timeout"],
                promise_param=encoded_value(data.get("param", "")),
                promise_tags=tags,
                now=self.now,
                count=UPCOMING,
            )
        except ProtocolError as refused:
            self.add_error(FORM_FIELDS.get(refused.field or ""), refused.message)
        data["promise_tags"] = tags
        return data


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
    form = ScheduleForm
    change_form_template = "admin/resonate/schedule_change_form.html"
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

    # --- add and edit (through the schedule handlers; never a raw save) ---

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_act_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        return self.has_act_permission(request)

    def get_fieldsets(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        if not self.has_act_permission(request):
            return self.fieldsets
        editable = ("cron", "promise_id", "promise_timeout", "target", "param", "tags")
        first = ("id", *editable) if obj is None else ("id", *editable, "words_view")
        sets: list[tuple[str | None, dict[str, Any]]] = [(None, {"fields": first})]
        if obj is not None:
            sets.append(("Runs", {"fields": ("upcoming_view", "last_view", "occurrences_view")}))
        return sets

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        if obj is not None and self.has_act_permission(request):
            return ("id", *self.readonly_fields)
        return self.readonly_fields

    def get_form(
        self, request: HttpRequest, obj: Schedule | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        now = request_now(request)

        class AtNow(form):  # type: ignore[valid-type,misc]
            def __init__(self, *args: Any, **kw: Any) -> None:
                super().__init__(*args, now=now, **kw)

        return AtNow

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> Any:
        """ "Preview" posts the form and answers it again with the next fire times (or what is
        wrong), saving nothing."""
        if request.method == "POST" and "_preview" in request.POST:
            return self.preview_view(request, object_id)
        return super().changeform_view(request, object_id, form_url, extra_context)

    def preview_view(self, request: HttpRequest, object_id: str | None) -> HttpResponse:
        obj = None if object_id is None else self.get_object(request, unquote(object_id))
        if object_id is not None and obj is None:
            raise Http404(f"no schedule {unquote(object_id)!r}")
        if not (
            self.has_change_permission(request, obj) if obj else self.has_add_permission(request)
        ):
            raise PermissionDenied
        form = self.get_form(request, obj, change=obj is not None)(
            request.POST, instance=obj or Schedule()
        )
        form.is_valid()
        fieldsets = self.get_fieldsets(request, obj)
        readonly = self.get_readonly_fields(request, obj)
        adminform = helpers.AdminForm(form, list(fieldsets), {}, readonly, model_admin=self)
        context = {
            **self.admin_site.each_context(request),
            "title": ("Change" if obj else "Add") + " schedule (preview: nothing saved)",
            "subtitle": None,
            "adminform": adminform,
            "object_id": object_id,
            "original": obj,
            "is_popup": False,
            "to_field": None,
            "media": self.media + adminform.media,
            "inline_admin_formsets": [],
            "errors": helpers.AdminErrorList(form, []),
            "preserved_filters": self.get_preserved_filters(request),
        }
        return self.render_change_form(
            request, context, add=obj is None, change=obj is not None, obj=obj
        )

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        data, now = form.cleaned_data, now_ms()
        fields = {
            "cron": data["cron"],
            "promise_id": data["promise_id"],
            "promise_timeout": data["promise_timeout"],
            "promise_param": encoded_value(data.get("param", "")),
            "promise_tags": data["promise_tags"],
            "now": now,
        }
        try:
            if change:
                record = schedule_replace(id=obj.pk, **fields)
            else:
                record = schedule_create(id=obj.pk, **fields)
        except ProtocolError as refused:  # it changed between the form's check and now
            self.message_user(request, f"{obj.pk}: refused ({refused.message})", messages.ERROR)
            return
        self.message_user(
            request,
            f"{obj.pk}: next run {when(record['nextRunAt'], now)}",
            messages.INFO,
        )

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Schedule | None = None,
    ) -> HttpResponse:
        form = context["adminform"].form
        now = request_now(request)
        context["schedule_preview"] = [when(t, now) for t in form.preview]
        context["schedule_preview_words"] = (
            cron_words(form.cleaned_data["cron"]) if form.preview else ""
        )
        return super().render_change_form(request, context, add, change, form_url, obj)

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
