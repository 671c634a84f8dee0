"""The operator console for the outbox: what is still to be delivered, to where, how old, how
often tried and why it failed, which push messages were dead-lettered and which unicast poll
messages were set aside as undeliverable; re-send (which revives either) and purge (either).
See ``resonate_project/edges/admin/kit.py`` for the rules every console page follows."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from outbox.delivery import wire
from outbox.models import PUSH_Q, Message, Quarantine
from outbox.services import purge, resend
from resonate_project.edges.admin.kit import (
    EMPTY,
    OperatorAdmin,
    Report,
    cell,
    duration,
    pretty_json,
    request_now,
    seen_at,
    when,
)
from tasks_app.models import Task

ERROR_CHARS = 80  # of last_error in the list

# The index links to the operator overview (resonate_project/edges/admin/dashboard.py) above
# the apps, unless a host site has an index template of its own.
if admin.site.index_template is None:
    admin.site.index_template = "admin/resonate_index.html"


class TransportFilter(admin.SimpleListFilter):
    title = "transport"
    parameter_name = "transport"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("push", "HTTP push"), ("poll", "poll (SSE)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        match self.value():
            case "push":
                return queryset.filter(PUSH_Q)
            case "poll":
                return queryset.filter(address__startswith="poll://")
        return queryset


class FailingFilter(admin.SimpleListFilter):
    title = "last attempt"
    parameter_name = "failing"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "failed"), ("no", "no error")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        match self.value():
            case "yes":
                return queryset.exclude(last_error="")
            case "no":
                return queryset.filter(last_error="")
        return queryset


class DeadFilter(admin.SimpleListFilter):
    title = "delivery"
    parameter_name = "dead"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("yes", "dead letters"),
            ("undeliverable", "undeliverable (no stream)"),
            ("no", "being delivered"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        match self.value():
            case "yes":
                return queryset.filter(dead_at__isnull=False, undeliverable_at__isnull=True)
            case "undeliverable":
                return queryset.filter(undeliverable_at__isnull=False)
            case "no":
                return queryset.filter(dead_at__isnull=True)
        return queryset


class DueFilter(admin.SimpleListFilter):
    title = "due"
    parameter_name = "due"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("now", "due now"), ("later", "in flight or backing off")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = request_now(request)
        match self.value():
            case "now":
                return queryset.filter(next_attempt_at__lte=now, dead_at__isnull=True)
            case "later":
                return queryset.filter(next_attempt_at__gt=now, dead_at__isnull=True)
        return queryset


@admin.register(Message)
class MessageAdmin(OperatorAdmin[Message]):
    act_permission = "outbox.act_on_message"
    list_display = (
        "key",
        "kind",
        "address",
        "age_column",
        "attempts",
        "next_column",
        "error_column",
    )
    list_filter = ("kind", TransportFilter, DeadFilter, FailingFilter, DueFilter)
    search_fields = ("key",)
    search_help_text = "A key prefix (the task id for execute), or an address prefix."
    ordering = ("created_at", "key")
    actions = ("resend_messages", "purge_messages")
    fieldsets = (
        (None, {"fields": ("key", "kind", "address", "subject_view", "version")}),
        (
            "Delivery",
            {
                "fields": (
                    "created_view",
                    "attempts",
                    "next_view",
                    "dead_view",
                    "undeliverable_view",
                    "last_error",
                    "revision",
                )
            },
        ),
        ("As sent", {"fields": ("wire_view",)}),
    )
    readonly_fields = (
        "subject_view",
        "created_view",
        "next_view",
        "dead_view",
        "undeliverable_view",
        "wire_view",
    )

    def search_q(self, term: str) -> Q:
        return Q(key__startswith=term) | Q(address__startswith=term)

    # --- columns ---

    @admin.display(description="age", ordering="created_at")
    def age_column(self, m: Message) -> str:
        return duration(seen_at(m) - m.created_at)

    @admin.display(description="next attempt", ordering="next_attempt_at")
    def next_column(self, m: Message) -> SafeString | str:
        if m.undeliverable_at is not None:
            return format_html("undeliverable<br>{}", cell(m.undeliverable_at, seen_at(m)))
        if m.dead_at is not None:
            return format_html("dead letter<br>{}", cell(m.dead_at, seen_at(m)))
        if m.next_attempt_at <= seen_at(m):
            return "due"
        return cell(m.next_attempt_at, seen_at(m))

    @admin.display(description="last error")
    def error_column(self, m: Message) -> str:
        if not m.last_error:
            return EMPTY
        cut = m.last_error[:ERROR_CHARS]
        return cut if len(m.last_error) <= ERROR_CHARS else f"{cut}…"

    # --- detail ---

    @admin.display(description="about")
    def subject_view(self, m: Message) -> SafeString | str:
        if m.kind == "execute" and m.task_id is not None:
            task = Task.objects.filter(promise_id=m.task_id).first()
            return self.link(task, f"task {m.task_id}") if task is not None else m.task_id
        if m.promise:
            return format_html("promise {} ({})", m.promise.get("id"), m.promise.get("state"))
        return EMPTY

    @admin.display(description="written")
    def created_view(self, m: Message) -> SafeString | str:
        return when(m.created_at, seen_at(m))

    @admin.display(description="next attempt")
    def next_view(self, m: Message) -> SafeString | str:
        return when(m.next_attempt_at, seen_at(m))

    @admin.display(description="dead-lettered")
    def dead_view(self, m: Message) -> SafeString | str:
        """No more attempts until re-sent (``PUSH_MAX_ATTEMPTS`` or ``PUSH_MAX_AGE_MS``)."""
        return when(m.dead_at, seen_at(m))

    @admin.display(description="undeliverable since")
    def undeliverable_view(self, m: Message) -> SafeString | str:
        """Set aside: its poll://uni@ stream stayed away UNDELIVERABLE_AFTER_MS; due again when
        that stream connects, or when re-sent."""
        return when(m.undeliverable_at, seen_at(m))

    @admin.display(description="message")
    def wire_view(self, m: Message) -> SafeString:
        return pretty_json(wire(m))

    # --- actions ---

    def object_actions(self, request: HttpRequest, obj: Message) -> list[tuple[str, str]]:
        if obj.dead_at is not None:
            return [("resend_messages", "Re-send now"), ("purge_messages", "Purge")]
        return [("resend_messages", "Re-send now")]

    @admin.action(description="Re-send selected messages now", permissions=["act"])
    def resend_messages(
        self, request: HttpRequest, queryset: QuerySet[Message]
    ) -> HttpResponse | None:
        """Due now, attempts and error cleared, a dead letter live again; any claim in flight is
        fenced out. Delivery stays at least once."""
        rows = self.selected(queryset)
        if self.too_many(request, rows):
            return None

        def act(m: Message, now: int, report: Report) -> None:
            resend(key=m.key, now=now)
            dead = ", dead letter" if m.dead_at is not None else ""
            if m.undeliverable_at is not None:
                dead = ", undeliverable"
            report.changed(m, f"due now (was: {m.attempts} attempts{dead})")

        self.run_each(request, rows, "Re-send", act)
        return self.after(request, rows)

    @admin.action(
        description="Purge selected dead letters and undeliverable messages", permissions=["act"]
    )
    def purge_messages(
        self, request: HttpRequest, queryset: QuerySet[Message]
    ) -> HttpResponse | None:
        """Delete them for good; a message still being delivered is refused (nothing owed is
        dropped)."""
        rows = self.selected(queryset)
        if self.too_many(request, rows):
            return None

        def act(m: Message, now: int, report: Report) -> None:
            purge(key=m.key)
            report.changed(m, "purged")

        self.run_each(request, rows, "Purge", act)
        return self.after(request, rows)


@admin.register(Quarantine)
class QuarantineAdmin(admin.ModelAdmin):
    """The rows an internal step set aside (``engine.steps``): read-only, each with its error;
    deleting an entry lets the step try its row again."""

    list_display = ("step", "row", "due_at", "at", "error")
    list_filter = ("step",)
    search_fields = ("row",)
    readonly_fields = ("step", "row", "due_at", "at", "error")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Quarantine | None = None) -> bool:
        return False
