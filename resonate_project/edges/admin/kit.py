"""The admin framework every app's admin stands on: the page's instant, time and payload
display, links, the target-group filter, and ``OperatorAdmin`` (read-only protocol objects whose
actions call the typed services, with ``now`` read once per action and each refusal reported).

The admin only shows and reports. Every state change goes through a typed service of the owning
app, so operators get the same guarantees as workers. Protocol objects have no add, change or
delete forms; acting needs the app's ``act_on_*`` permission, and the view permission alone shows
everything read-only. Every state is shown projected (C8), at one instant per page.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode, urlsplit

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote
from django.db.models import BigIntegerField, Model, Q, QuerySet, Value
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from resonate_project.core.addresses import is_push, parse_poll
from resonate_project.core.clock import now_ms
from resonate_project.core.errors import ProtocolError
from resonate_project.core.present import decoded_bytes, iso, relative, span

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
    return iso(ms)


def duration(ms: int) -> str:
    return span(ms)


def cell(ms: int | None, now: int) -> SafeString | str:
    """``when`` for a list column: to the second, the distance below, the exact ms on hover."""
    if ms is None:
        return EMPTY
    moment = iso(ms)
    if moment.endswith(" UTC"):  # to the second (past year 9999 it is the raw ms)
        moment = moment[:19]
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
    raw = decoded_bytes(data)
    if raw is None:
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


# ``site`` is the name of the AdminSite the page belongs to, so links stay on a host's own site
# (docs/how-to/embedding.md#settings-urls-and-asgi); None is the default site.


def change_url(obj: Model, site: str | None = None) -> str:
    opts = obj._meta
    name = f"admin:{opts.app_label}_{opts.model_name}_change"
    return reverse(name, args=[quote(obj.pk)], current_app=site)


def changelist_url(model: type[Model], site: str | None = None, **query: str) -> str:
    opts = model._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist", current_app=site)
    return f"{url}?{urlencode(query)}" if query else url


def link(obj: Model, text: str | None = None, site: str | None = None) -> SafeString:
    label = text if text is not None else obj.pk
    return format_html('<a href="{}">{}</a>', change_url(obj, site), label)


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


# --- instant ranges ---------------------------------------------------------------------------


MAX_INSTANT = 2**63 - 1  # a BIGINT, the columns' type


class BadInstant(ValueError):
    """A range bound that is not an instant; its message names the parameter."""


def parse_instant(name: str, text: str) -> int:
    """A range bound in ms: an integer (ms since the epoch), or an ISO date or date-time (UTC
    unless it names an offset; ``2026-12-02``, ``2026-12-02T13:05``, ``2026-12-02 13:05:09Z``)."""
    text = text.strip()
    if text.lstrip("-").isdigit() and len(text) <= 20 and abs(int(text)) <= MAX_INSTANT:
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadInstant(
            f"{name}: {text[:40]!r} is not a date-time (YYYY-MM-DD[THH:MM[:SS]], UTC) or ms"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def instant_input(ms: int) -> str:
    """``ms`` as a ``datetime-local`` input's value (UTC, to the second)."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return str(ms)


class RangeFilter(admin.ListFilter):
    """A from/to range over an instant (ms), two ``datetime-local`` inputs in the filter panel
    (UTC). ``bounds_q(low, high, request)`` says which rows fall in it; a bound that does not
    parse is refused by ``OperatorAdmin.changelist_view`` (400 naming it) before any query."""

    template = "admin/resonate/range_filter.html"
    parameter = ""

    def __init__(
        self, request: HttpRequest, params: dict[str, Any], model: Any, model_admin: Any
    ) -> None:
        super().__init__(request, params, model, model_admin)
        self.used: dict[str, str] = {}
        for name in (self.low_name, self.high_name):
            if name in params:
                value = params.pop(name)
                self.used[name] = str(value[-1] if isinstance(value, list) else value)

    @property
    def low_name(self) -> str:
        return f"{self.parameter}_from"

    @property
    def high_name(self) -> str:
        return f"{self.parameter}_to"

    def expected_parameters(self) -> list[str | None]:
        return [self.low_name, self.high_name]

    def has_output(self) -> bool:
        return True

    def bounds(self) -> tuple[int | None, int | None]:
        low, high = (self.used.get(n, "").strip() for n in (self.low_name, self.high_name))
        return (
            parse_instant(self.low_name, low) if low else None,
            parse_instant(self.high_name, high) if high else None,
        )

    def bounds_q(self, low: int | None, high: int | None, request: HttpRequest) -> Q:
        raise NotImplementedError

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        low, high = self.bounds()
        if low is None and high is None:
            return queryset
        return queryset.filter(self.bounds_q(low, high, request))

    def choices(self, changelist: Any) -> Iterator[dict[str, Any]]:
        low, high = self.bounds()
        keep = [
            (k, v)
            for k, values in changelist.params.items()
            if k not in self.expected_parameters() and k != "p"
            for v in (values if isinstance(values, list) else [values])
        ]
        yield {
            "low_name": self.low_name,
            "high_name": self.high_name,
            "low": "" if low is None else instant_input(low),
            "high": "" if high is None else instant_input(high),
            "hidden": keep,
            "active": low is not None or high is not None,
            "clear": changelist.get_query_string(remove=self.expected_parameters()),
        }


def range_errors(request: HttpRequest, filters: Iterable[Any]) -> str | None:
    """The first range bound in the query string that does not parse, as a message."""
    for f in filters:
        if isinstance(f, type) and issubclass(f, RangeFilter):
            for name in (f"{f.parameter}_from", f"{f.parameter}_to"):
                text = request.GET.get(name, "").strip()
                if text:
                    try:
                        parse_instant(name, text)
                    except BadInstant as bad:
                        return str(bad)
    return None


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

    def link(self, obj: Model, text: str | None = None) -> SafeString:
        """A link to ``obj``'s page on this admin's own site."""
        return link(obj, text, self.admin_site.name)

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

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        refused = range_errors(request, self.list_filter)
        if refused is not None:
            return HttpResponseBadRequest(refused, content_type="text/plain; charset=utf-8")
        return super().changelist_view(request, extra_context)

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
            "rows": [(obj, self.link(obj), describe(obj)) for obj in objects],
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
                return HttpResponseRedirect(change_url(obj, self.admin_site.name))
            return HttpResponseRedirect(changelist_url(type(obj), self.admin_site.name))
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
