"""The operator console: promises here, plus the plumbing the other apps' admins share.

The admin only shows and reports. Every state change goes through a protocol handler
(``resonate_project.envelope.call``) or an operator function of the owning app, with ``now`` read
once per action, so operators get the same guarantees as workers. Protocol objects have no add,
change or delete forms; acting needs the app's ``act_on_*`` permission, and the view permission
alone shows everything read-only. Every state is shown projected (C8), at one instant per page.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode, urlsplit

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote
from django.db.models import BigIntegerField, Model, Q, QuerySet, TextField, Value
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from promises.models import Callback, Listener, Promise
from promises.selectors import PROMISE_STATES, filter_tags, projected_state_q
from promises.services import promise_settle
from resonate_project.core.addresses import is_push, parse_poll
from resonate_project.core.clock import now_ms
from resonate_project.core.errors import ProtocolError
from resonate_project.core.protocol import is_live, projected_state, viewed_task_state
from resonate_project.core.tags import SCHEDULE
from tasks_app.models import Task

# The instant a page is rendered at, as a column on every row (admin display callables get only
# the row; the ModelAdmin is shared between threads, so it cannot hold per-request state).
NOW = "resonate_now"
# Objects one action may touch: each is its own transaction, so a select-all across a large
# table would hold the request for minutes.
ACTION_LIMIT = 500
# Per-object lines in one message; beyond it the rest are counted.
MESSAGE_DETAIL = 10
# Decoded payloads longer than this are cut in the detail page.
SHOW_BYTES = 64 * 1024
# Promise tree bounds: nodes below the shown promise, and ancestors above it.
TREE_NODES = 200
TREE_ANCESTORS = 50
# Callbacks and listeners listed on a promise's page (a promise may be awaited by thousands).
RELATED_SHOWN = 200
PARENT = "resonate:parent"
EMPTY = "—"


# --- time and values ---------------------------------------------------------------------------


def request_now(request: HttpRequest) -> int:
    """The clock, read once per request: every row, filter and projection of a page agree."""
    now: int | None = getattr(request, "_resonate_now", None)
    if now is None:
        now = now_ms()
        request._resonate_now = now  # type: ignore[attr-defined]
    return now


def seen_at(obj: Model) -> int:
    now: int = getattr(obj, NOW)
    return now


def with_now[M: Model](qs: QuerySet[M], request: HttpRequest) -> QuerySet[M]:
    return qs.annotate(**{NOW: Value(request_now(request), output_field=BigIntegerField())})


def ms_datetime(ms: int) -> str:
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d} UTC"


def duration(ms: int) -> str:
    """``1d 2h``, ``3m 4s``, ``250ms``: the two largest units."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or parts:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
        if len(parts) == 2:
            break
    return " ".join(p for p in parts if not p.startswith("0")) or "0s"


def relative(ms: int, now: int) -> str:
    return f"in {duration(ms - now)}" if ms > now else f"{duration(now - ms)} ago"


def cell(ms: int | None, now: int) -> SafeString | str:
    """``when`` for a list column: to the second, the distance below, the exact ms on hover."""
    if ms is None:
        return EMPTY
    moment = datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return format_html(
        '<span title="{} ({} ms)" style="white-space:nowrap">{}</span><br>'
        '<small class="quiet">{}</small>',
        ms_datetime(ms),
        ms,
        moment,
        relative(ms, now),
    )


def when(ms: int | None, now: int) -> SafeString | str:
    """A readable UTC instant with its distance from the page's now; the raw ms in the tooltip."""
    if ms is None:
        return EMPTY
    return format_html(
        '<span title="{} ms">{}</span> <small class="quiet">({})</small>',
        ms,
        ms_datetime(ms),
        relative(ms, now),
    )


STATE_COLOURS = {
    "pending": "#205493",
    "acquired": "#6f42c1",
    "suspended": "#8a6d3b",
    "halted": "#b35900",
    "resolved": "#2e7d32",
    "fulfilled": "#2e7d32",
    "rejected": "#c62828",
    "rejected_canceled": "#757575",
    "rejected_timedout": "#ad1457",
}


def state_badge(state: str) -> SafeString:
    return format_html(
        '<span class="resonate-state" data-state="{}" style="color:#fff;background:{};'
        'padding:1px 6px;border-radius:8px;white-space:nowrap">{}</span>',
        state,
        STATE_COLOURS.get(state, "#555"),
        state,
    )


def pretty_json(value: Any) -> SafeString:
    return format_html(
        "<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    )


def decoded(headers: dict[str, str] | None, data: str | None) -> SafeString | str:
    """A protocol value: ``data`` is base64; shown as JSON, else as UTF-8 text, else as base64."""
    if headers is None and data is None:
        return EMPTY
    parts: list[SafeString] = []
    if headers:
        parts.append(format_html("<div>headers</div>{}", pretty_json(headers)))
    if data is not None:
        parts.append(decoded_data(data))
    return mark_safe("".join(parts))  # every part is format_html output


def decoded_data(data: str) -> SafeString:
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return format_html("<div>data (not base64, shown as sent)</div><pre>{}</pre>", data)
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return format_html(
            "<div>data: {} bytes, not UTF-8 (base64)</div><pre>{}</pre>",
            len(raw),
            data[:SHOW_BYTES],
        )
    if len(text) > SHOW_BYTES:
        return format_html(
            "<div>data (text, first {} of {} characters)</div><pre>{}</pre>",
            SHOW_BYTES,
            len(text),
            text[:SHOW_BYTES],
        )
    try:
        parsed = json.loads(text)
    except ValueError:
        return format_html("<div>data (text)</div><pre>{}</pre>", text)
    return format_html("<div>data (JSON)</div>{}", pretty_json(parsed))


def change_url(obj: Model) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[quote(obj.pk)])


def changelist_url(model: type[Model], **query: str) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
    return f"{url}?{urlencode(query)}" if query else url


def link(obj: Model, text: str | None = None) -> SafeString:
    return format_html('<a href="{}">{}</a>', change_url(obj), text if text is not None else obj.pk)


def promise_state_html(p: Promise, now: int) -> SafeString:
    return state_badge(projected_state(p, now)[0])


def task_of(p: Promise) -> Task | None:
    try:
        return p.task
    except Task.DoesNotExist:
        return None


# --- target groups -----------------------------------------------------------------------------


def target_group(address: str) -> str:
    """``workers`` for ``poll://any@workers/...``, ``https://host`` for a push URL."""
    poll = parse_poll(address)
    if poll is not None:
        return poll.group
    if is_push(address):
        parts = urlsplit(address)
        return f"{parts.scheme}://{parts.netloc}"
    return address


def target_group_q(field: str, group: str) -> Q:
    q = Q(**{field: group}) | Q(**{f"{field}__startswith": f"{group}/"})
    for mode in ("uni", "any"):
        base = f"poll://{mode}@{group}"
        q |= Q(**{field: base}) | Q(**{f"{field}__startswith": f"{base}/"})
    return q


class TargetGroupFilter(admin.SimpleListFilter):
    """By the group of ``resonate:target`` (the poll group, or the push host)."""

    title = "target group"
    parameter_name = "target"
    field = "target"
    # The choices come from a DISTINCT over the targets; bounded so a pathological table cannot
    # make every changelist slow.
    max_targets = 1000

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        targets = (
            model_admin.model.objects.exclude(**{f"{self.field}__isnull": True})
            .order_by(self.field)
            .values_list(self.field, flat=True)
            .distinct()[: self.max_targets]
        )
        groups = sorted({target_group(t) for t in targets})
        return [(g, g or "(empty target)") for g in groups]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        group = self.value()
        if group is None:
            return queryset
        return queryset.filter(target_group_q(self.field, group))


# --- the operator admin base --------------------------------------------------------------------


class SettleForm(forms.Form):
    value = forms.CharField(
        label="Value",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 6, "cols": 80}),
        help_text="Sent as the value's data (UTF-8, base64-encoded); JSON is what the SDKs "
        "expect. Empty: no value.",
    )


def encoded_value(text: str) -> dict[str, str]:
    return {"data": base64.b64encode(text.encode()).decode()} if text else {}


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class Report:
    """Collects one action's outcomes, logs the changes (LogEntry, with the user) and reports
    everything, refusals included, through the messages framework."""

    def __init__(self, model_admin: OperatorAdmin[Any], request: HttpRequest, verb: str) -> None:
        self.model_admin, self.request, self.verb = model_admin, request, verb
        self.done: list[str] = []
        self.unchanged: list[str] = []
        self.refused: list[str] = []

    def changed(self, obj: Model, detail: str, *, flag: int = CHANGE) -> None:
        message = f"{self.verb} from the admin: {detail}"
        if flag == CHANGE:
            self.model_admin.log_change(self.request, obj, message)
        else:
            user_id = self.request.user.pk
            assert user_id is not None  # the admin serves staff only
            LogEntry.objects.log_actions(
                user_id=user_id,
                queryset=[obj],
                action_flag=flag,
                change_message=message,
                single_object=True,
            )
        self.done.append(f"{obj.pk}: {detail}")

    def nothing(self, obj: Model, why: str) -> None:
        self.unchanged.append(f"{obj.pk}: {why}")

    def refusal(self, obj: Model, refused: ProtocolError) -> None:
        self.refused.append(f"{obj.pk}: refused ({refused.status} {refused.message})")

    def send(self) -> None:
        for lines, level, head in (
            (self.done, messages.SUCCESS, f"{self.verb}"),
            (self.unchanged, messages.WARNING, f"{self.verb}: nothing to do"),
            (self.refused, messages.ERROR, f"{self.verb}"),
        ):
            for line in lines[:MESSAGE_DETAIL]:
                self.model_admin.message_user(self.request, f"{head}: {line}", level)
            if len(lines) > MESSAGE_DETAIL:
                more = len(lines) - MESSAGE_DETAIL
                self.model_admin.message_user(self.request, f"{head}: and {more} more", level)


class OperatorAdmin[M: Model](admin.ModelAdmin):
    """Read-only protocol objects with operator actions.

    Actions are changelist actions (``permissions=["act"]``), so they can be applied to a
    selection; the detail page offers the ones that apply to its object as buttons that post the
    same action for that one object. An action that needs a value or a confirmation answers the
    first post with an intermediate page and acts on the second (``apply``).
    """

    act_permission = ""  # "app_label.codename"
    change_form_template = "admin/resonate/change_form.html"
    show_full_result_count = False  # a second COUNT(*) per page is wasted on large tables
    empty_value_display = EMPTY
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: M | None = None) -> bool:
        return False

    def has_act_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(self.act_permission)

    def get_queryset(self, request: HttpRequest) -> QuerySet[M]:
        return with_now(super().get_queryset(request), request)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[M], search_term: str
    ) -> tuple[QuerySet[M], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(self.search_q(term)), False

    def search_q(self, term: str) -> Q:
        """An id prefix by default (Django's ``search_fields`` would match anywhere in the id)."""
        return Q(pk__startswith=term)

    # --- detail page buttons ---

    def object_actions(self, request: HttpRequest, obj: M) -> list[tuple[str, str]]:
        """``(action name, label)`` for the actions that apply to ``obj`` as it is now."""
        return []

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: M | None = None,
    ) -> HttpResponse:
        if obj is not None and self.has_act_permission(request):
            context["resonate_actions"] = self.object_actions(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    # --- running actions ---

    def too_many(self, request: HttpRequest, objects: Sequence[M]) -> bool:
        if len(objects) > ACTION_LIMIT:
            self.message_user(
                request,
                f"{len(objects)} objects selected; an action takes at most {ACTION_LIMIT}. "
                "Narrow the selection with a filter.",
                messages.ERROR,
            )
            return True
        return False

    def selected(self, queryset: QuerySet[M]) -> list[M]:
        return list(queryset[: ACTION_LIMIT + 1])

    def confirmation(
        self,
        request: HttpRequest,
        objects: Sequence[M],
        *,
        action: str,
        title: str,
        submit: str,
        describe: Callable[[M], SafeString | str],
        form: forms.Form | None = None,
        warning: str = "",
    ) -> TemplateResponse:
        opts = self.model._meta
        context = {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": opts,
            "app_label": opts.app_label,
            "rows": [(obj, link(obj), describe(obj)) for obj in objects],
            "action": action,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "return_to": request.POST.get("_return", ""),
            "form": form,
            "submit": submit,
            "warning": warning,
            "media": self.media,
        }
        return TemplateResponse(request, "admin/resonate/action_confirm.html", context)

    def after(self, request: HttpRequest, objects: Sequence[M]) -> HttpResponseRedirect | None:
        """Back to the detail page when the action came from there (and the object remains);
        otherwise ``None``, and Django returns to the changelist."""
        if request.POST.get("_return") == "change" and len(objects) == 1:
            obj = objects[0]
            if type(obj)._default_manager.filter(pk=obj.pk).exists():
                return HttpResponseRedirect(change_url(obj))
            return HttpResponseRedirect(changelist_url(type(obj)))
        return None

    def run_each(
        self,
        request: HttpRequest,
        objects: Iterable[M],
        verb: str,
        act: Callable[[M, int, Report], None],
    ) -> Report:
        """``act(obj, now, report)`` for each object, with ``now`` read once for the action; a
        service's refusal is reported for its object and the others go on."""
        now = now_ms()
        report = Report(self, request, verb)
        count = 0
        for obj in objects:
            try:
                act(obj, now, report)
            except ProtocolError as refused:
                report.refusal(obj, refused)
            count += 1
        if not count:
            self.message_user(
                request,
                f"{verb}: the selected {self.model._meta.verbose_name_plural} no longer exist "
                "(delivered, or deleted meanwhile)",
                messages.WARNING,
            )
        report.send()
        return report


# --- promises ------------------------------------------------------------------------------------


class ProjectedStateFilter(admin.SimpleListFilter):
    title = "state (projected)"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(s, s) for s in PROMISE_STATES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        state = self.value()
        if state not in PROMISE_STATES:
            return queryset
        return queryset.filter(projected_state_q(state, request_now(request)))


class KindFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("timer", "timer"),
            ("external", "external (not a timer)"),
            ("internal", "internal"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        match self.value():
            case "timer":
                return queryset.filter(timer=True)
            case "external":
                return queryset.filter(external=True, timer=False)
            case "internal":
                return queryset.filter(external=False)
        return queryset


class OverdueFilter(admin.SimpleListFilter):
    """Stored pending past the deadline: projected as settled, not yet materialised (external
    promises wait for the timeout step; internal ones are never swept, C1)."""

    title = "overdue"
    parameter_name = "overdue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "pending past its deadline"), ("no", "not overdue")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        overdue = Q(state="pending", timeout_at__lte=request_now(request))
        match self.value():
            case "yes":
                return queryset.filter(overdue)
            case "no":
                return queryset.exclude(overdue)
        return queryset


def kind_of(p: Promise) -> str:
    if p.timer:
        return "timer"
    return "external" if p.external else "internal"


def children_of(parent_ids: Sequence[str], limit: int) -> list[Promise]:
    text = Cast(KeyTextTransform(PARENT, "tags"), output_field=TextField())
    return list(
        Promise.objects.alias(_parent=text)
        .filter(_parent__in=list(parent_ids))
        .select_related("task")
        .order_by("created_at", "id")[:limit]
    )


@admin.register(Promise)
class PromiseAdmin(OperatorAdmin[Promise]):
    act_permission = "promises.act_on_promise"
    list_display = (
        "id",
        "state_column",
        "kind_column",
        "target",
        "timeout_column",
        "created_column",
        "settled_column",
    )
    list_filter = (ProjectedStateFilter, KindFilter, OverdueFilter, TargetGroupFilter)
    search_fields = ("id",)
    search_help_text = "An id prefix, or a tag as key=value (resonate:schedule=nightly)."
    ordering = ("-created_at",)
    actions = ("resolve_promises", "reject_promises", "cancel_promises")
    fieldsets = (
        (None, {"fields": ("id", "state_view", "kind_view", "target", "task_view")}),
        ("Times", {"fields": ("timeout_view", "created_view", "settled_view")}),
        ("Data", {"fields": ("param_view", "value_view", "tags_view")}),
        (
            "Call tree and subscriptions",
            {"fields": ("tree_view", "awaits_view", "awaited_by_view", "listeners_view")},
        ),
    )
    readonly_fields = (
        "state_view",
        "kind_view",
        "task_view",
        "timeout_view",
        "created_view",
        "settled_view",
        "param_view",
        "value_view",
        "tags_view",
        "tree_view",
        "awaits_view",
        "awaited_by_view",
        "listeners_view",
    )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Promise], search_term: str
    ) -> tuple[QuerySet[Promise], bool]:
        term = search_term.strip()
        if "=" in term:
            key, value = term.split("=", 1)
            return filter_tags(queryset, "tags", {key.strip(): value.strip()}), False
        return super().get_search_results(request, queryset, term)

    # --- columns ---

    @admin.display(description="state")
    def state_column(self, p: Promise) -> SafeString:
        return promise_state_html(p, seen_at(p))

    @admin.display(description="kind")
    def kind_column(self, p: Promise) -> str:
        return kind_of(p)

    @admin.display(description="timeout (UTC)", ordering="timeout_at")
    def timeout_column(self, p: Promise) -> SafeString | str:
        return cell(p.timeout_at, seen_at(p))

    @admin.display(description="created (UTC)", ordering="created_at")
    def created_column(self, p: Promise) -> SafeString | str:
        return cell(p.created_at, seen_at(p))

    @admin.display(description="settled (UTC)")
    def settled_column(self, p: Promise) -> SafeString | str:
        return cell(projected_state(p, seen_at(p))[1], seen_at(p))

    # --- detail ---

    @admin.display(description="state")
    def state_view(self, p: Promise) -> SafeString:
        now = seen_at(p)
        state = projected_state(p, now)[0]
        if state == p.state:
            return state_badge(state)
        return format_html(
            "{} <small>stored {}: its deadline passed and the timeout step has not written the "
            "settlement yet{}</small>",
            state_badge(state),
            p.state,
            "" if p.external else " (an internal promise is never swept; it stays projected)",
        )

    @admin.display(description="kind")
    def kind_view(self, p: Promise) -> str:
        return kind_of(p)

    @admin.display(description="task")
    def task_view(self, p: Promise) -> SafeString | str:
        task = task_of(p)
        if task is None:
            return EMPTY
        state = viewed_task_state(task, p, seen_at(p))
        return format_html("{} {} version {}", link(task), state_badge(state), task.version)

    @admin.display(description="timeout")
    def timeout_view(self, p: Promise) -> SafeString | str:
        return when(p.timeout_at, seen_at(p))

    @admin.display(description="created")
    def created_view(self, p: Promise) -> SafeString | str:
        return when(p.created_at, seen_at(p))

    @admin.display(description="settled")
    def settled_view(self, p: Promise) -> SafeString | str:
        return when(projected_state(p, seen_at(p))[1], seen_at(p))

    @admin.display(description="param")
    def param_view(self, p: Promise) -> SafeString | str:
        return decoded(p.param_headers, p.param_data)

    @admin.display(description="value")
    def value_view(self, p: Promise) -> SafeString | str:
        return decoded(p.value_headers, p.value_data)

    @admin.display(description="tags")
    def tags_view(self, p: Promise) -> SafeString:
        return pretty_json(p.tags)

    @admin.display(description="call tree")
    def tree_view(self, p: Promise) -> SafeString:
        """Ancestors by ``resonate:parent`` up to the root, and the promises below this one."""
        now = seen_at(p)
        ancestors: list[Promise] = []
        seen = {p.id}
        parent_id = p.tags.get(PARENT)
        while parent_id and parent_id not in seen and len(ancestors) < TREE_ANCESTORS:
            parent = Promise.objects.filter(id=parent_id).select_related("task").first()
            if parent is None:
                break
            ancestors.append(parent)
            seen.add(parent.id)
            parent_id = parent.tags.get(PARENT)
        below: dict[str, list[Promise]] = {}
        level, count = [p.id], 0
        while level and count < TREE_NODES:
            children = [c for c in children_of(level, TREE_NODES - count + 1) if c.id not in seen]
            children = children[: TREE_NODES - count]
            for child in children:
                below.setdefault(child.tags[PARENT], []).append(child)
                seen.add(child.id)
            count += len(children)
            level = [c.id for c in children]

        def node(q: Promise, current: bool = False) -> SafeString:
            task = task_of(q)
            task_html = (
                format_html(" task {}", state_badge(viewed_task_state(task, q, now)))
                if task is not None
                else ""
            )
            name = format_html("<strong>{}</strong>", q.id) if current else link(q)
            return format_html("{} {}{}", name, promise_state_html(q, now), task_html)

        def subtree(q: Promise) -> SafeString:
            kids = below.get(q.id, [])
            if not kids:
                return mark_safe("")
            items = format_html_join("", "<li>{}{}</li>", ((node(k), subtree(k)) for k in kids))
            return format_html("<ul>{}</ul>", items)

        html = format_html("<ul><li>{}{}</li></ul>", node(p, current=True), subtree(p))
        for ancestor in ancestors:
            html = format_html("<ul><li>{}{}</li></ul>", node(ancestor), html)
        if count >= TREE_NODES:
            html = format_html("{}<p>(only the first {} descendants)</p>", html, TREE_NODES)
        return html

    @admin.display(description="its task awaits")
    def awaits_view(self, p: Promise) -> SafeString | str:
        rows = (
            Callback.objects.filter(awaiter=p)
            .select_related("awaited", "awaited__task")
            .order_by("awaited_id")[:RELATED_SHOWN]
        )
        return self.promise_list([cb.awaited for cb in rows], seen_at(p))

    @admin.display(description="awaited by (tasks resumed when it settles)")
    def awaited_by_view(self, p: Promise) -> SafeString | str:
        rows = (
            Callback.objects.filter(awaited=p)
            .select_related("awaiter", "awaiter__task")
            .order_by("awaiter_id")[:RELATED_SHOWN]
        )
        return self.promise_list([cb.awaiter for cb in rows], seen_at(p))

    @admin.display(description="listeners (unblocked when it settles)")
    def listeners_view(self, p: Promise) -> SafeString | str:
        addresses = list(
            Listener.objects.filter(awaited=p)
            .order_by("address")
            .values_list("address", flat=True)[:RELATED_SHOWN]
        )
        if not addresses:
            return EMPTY
        items = format_html_join("", "<li>{}</li>", ((a,) for a in addresses))
        return format_html("<ul>{}</ul>", items)

    def promise_list(self, promises: list[Promise], now: int) -> SafeString | str:
        if not promises:
            return EMPTY
        items = []
        for q in promises:
            task = task_of(q)
            task_html = (
                format_html(" task {}", state_badge(viewed_task_state(task, q, now)))
                if task is not None
                else ""
            )
            items.append((link(q), promise_state_html(q, now), task_html))
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{} {}{}</li>", items))

    # --- actions ---

    def object_actions(self, request: HttpRequest, obj: Promise) -> list[tuple[str, str]]:
        if not is_live(obj, seen_at(obj)):
            return []
        return [
            ("resolve_promises", "Resolve…"),
            ("reject_promises", "Reject…"),
            ("cancel_promises", "Cancel…"),
        ]

    @admin.action(description="Resolve selected promises…", permissions=["act"])
    def resolve_promises(
        self, request: HttpRequest, queryset: QuerySet[Promise]
    ) -> HttpResponse | None:
        return self.settle(request, queryset, "resolved", "Resolve", "resolve_promises")

    @admin.action(description="Reject selected promises…", permissions=["act"])
    def reject_promises(
        self, request: HttpRequest, queryset: QuerySet[Promise]
    ) -> HttpResponse | None:
        return self.settle(request, queryset, "rejected", "Reject", "reject_promises")

    @admin.action(description="Cancel selected promises…", permissions=["act"])
    def cancel_promises(
        self, request: HttpRequest, queryset: QuerySet[Promise]
    ) -> HttpResponse | None:
        return self.settle(request, queryset, "rejected_canceled", "Cancel", "cancel_promises")

    def settle(
        self,
        request: HttpRequest,
        queryset: QuerySet[Promise],
        state: str,
        verb: str,
        action: str,
    ) -> HttpResponse | None:
        """``promise.settle`` for each selected promise. The first verdict wins: a promise already
        settled (or past its deadline) is left as it is and reported so."""
        promises = self.selected(queryset)
        if self.too_many(request, promises):
            return None
        form = SettleForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            return self.confirmation(
                request,
                promises,
                action=action,
                title=f"{verb} {plural(len(promises), 'promise')} ({state})",
                submit=verb,
                describe=lambda p: promise_state_html(p, seen_at(p)),
                form=form,
                warning="The first settlement wins and cannot be undone; awaiting tasks are "
                "resumed and listeners notified at once.",
            )
        value = encoded_value(form.cleaned_data["value"])

        def act(p: Promise, now: int, report: Report) -> None:
            record = promise_settle(id=p.id, state=state, value=value, now=now)
            if record["state"] == state and record.get("settledAt") == now:
                report.changed(p, state)
            else:
                report.nothing(p, f"already {record['state']}")

        self.run_each(request, promises, verb, act)
        return self.after(request, promises)


def schedule_promises(schedule_id: str, limit: int) -> list[Promise]:
    """The occurrences of a schedule (tag ``resonate:schedule``), newest first."""
    qs = filter_tags(Promise.objects.select_related("task"), "tags", {SCHEDULE: schedule_id})
    return list(qs.order_by("-created_at", "-id")[:limit])
