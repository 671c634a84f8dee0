"""The operator console for promises (it stands on ``resonate_project.edges.admin.kit``).

Settling goes through ``promises.services.promise_settle``, with ``now`` read once per action.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import quote, unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from promises.models import Callback, Listener, Promise
from promises.selectors import (
    PROMISE_STATES,
    ROOT_Q,
    children_of,
    filter_tags,
    projected_state_q,
    root_of,
)
from promises.services import promise_settle
from resonate_project.core.protocol import is_live, projected_state, viewed_task_state
from resonate_project.core.tags import PARENT
from resonate_project.edges.admin import runs
from resonate_project.edges.admin.kit import (
    EMPTY,
    RELATED_SHOWN,
    TREE_ANCESTORS,
    TREE_NODES,
    OperatorAdmin,
    RangeFilter,
    Report,
    SettleForm,
    TargetGroupFilter,
    cell,
    decoded,
    encoded_value,
    plural,
    pretty_json,
    request_now,
    seen_at,
    state_badge,
    when,
)
from resonate_project.edges.admin.runs import function_html, promise_state_html, task_of

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


class CallTreeFilter(admin.SimpleListFilter):
    """Roots (a run: no ``resonate:parent``, or itself) apart from the calls made inside one."""

    title = "call tree"
    parameter_name = "tree"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("root", "roots (runs)"), ("child", "children (calls inside a run)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        match self.value():
            case "root":
                return queryset.filter(ROOT_Q)
            case "child":
                return queryset.exclude(ROOT_Q)
        return queryset


class FunctionFilter(admin.SimpleListFilter):
    """By the function the SDK named in the call's param (``core.calls``)."""

    title = "function"
    parameter_name = "function"
    # A DISTINCT over the indexed column, bounded like the target groups.
    max_functions = 1000

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = (
            Promise.objects.filter(function__isnull=False)
            .order_by("function")
            .values_list("function", flat=True)
            .distinct()[: self.max_functions]
        )
        return [(str(n), str(n)) for n in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        name = self.value()
        return queryset if name is None else queryset.filter(function=name)


class CreatedFilter(RangeFilter):
    title = "created"
    parameter = "created"

    def bounds_q(self, low: int | None, high: int | None, request: HttpRequest) -> Q:
        q = Q()
        if low is not None:
            q &= Q(created_at__gte=low)
        if high is not None:
            q &= Q(created_at__lte=high)
        return q


class SettledFilter(RangeFilter):
    """Settled in the range as projected at the page's now: a pending promise past its deadline
    counts as settled at its deadline."""

    title = "settled"
    parameter = "settled"

    def bounds_q(self, low: int | None, high: int | None, request: HttpRequest) -> Q:
        now = request_now(request)
        overdue = Q(state="pending", timeout_at__lte=now)
        stored, projected = Q(settled_at__isnull=False), overdue
        if low is not None:
            stored &= Q(settled_at__gte=low)
            projected &= Q(timeout_at__gte=low)
        if high is not None:
            stored &= Q(settled_at__lte=high)
            projected &= Q(timeout_at__lte=high)
        return stored | projected


def kind_of(p: Promise) -> str:
    if p.timer:
        return "timer"
    return "external" if p.external else "internal"


@admin.register(Promise)
class PromiseAdmin(OperatorAdmin[Promise]):
    act_permission = "promises.act_on_promise"
    change_list_template = "admin/resonate/promise_change_list.html"
    list_display = (
        "id",
        "function_column",
        "state_column",
        "kind_column",
        "target",
        "timeout_column",
        "created_column",
        "settled_column",
    )
    list_filter = (
        ProjectedStateFilter,
        CallTreeFilter,
        FunctionFilter,
        CreatedFilter,
        SettledFilter,
        KindFilter,
        OverdueFilter,
        TargetGroupFilter,
    )
    search_fields = ("id",)
    search_help_text = (
        "An id or function name prefix, or a tag as key=value (resonate:schedule=nightly)."
    )
    ordering = ("-created_at",)
    actions = ("resolve_promises", "reject_promises", "cancel_promises")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "function_view",
                    "state_view",
                    "kind_view",
                    "target",
                    "task_view",
                    "run_view",
                )
            },
        ),
        ("Times", {"fields": ("timeout_view", "created_view", "settled_view")}),
        ("Data", {"fields": ("param_view", "value_view", "tags_view")}),
        (
            "Call tree and subscriptions",
            {"fields": ("tree_view", "awaits_view", "awaited_by_view", "listeners_view")},
        ),
    )
    readonly_fields = (
        "function_view",
        "run_view",
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

    def search_q(self, term: str) -> Q:
        return Q(pk__startswith=term) | Q(function__startswith=term)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        run = path(
            "<path:object_id>/run/",
            self.admin_site.admin_view(self.run_page),
            name="{}_{}_run".format(*info),
        )
        return [run, *super().get_urls()]

    def run_url(self, p: Promise) -> str:
        info = self.opts.app_label, self.opts.model_name
        return reverse(
            "admin:{}_{}_run".format(*info), args=[quote(p.pk)], current_app=self.admin_site.name
        )

    def run_page(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """A run from its root: the call tree as a timeline, its tasks, listeners and messages.
        Opened on a promise inside a run, it shows the run from that run's root."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        p = self.get_object(request, unquote(object_id))
        if p is None:
            raise Http404(f"no promise {unquote(object_id)!r}")
        root = root_of(p, TREE_ANCESTORS)
        if root.pk != p.pk:
            return HttpResponseRedirect(self.run_url(root))
        now = request_now(request)
        context = {
            **self.admin_site.each_context(request),
            **runs.run_context(root, now, self.admin_site.name),
            "title": f"Run {root.id}",
            "opts": self.opts,
            "original": root,
            "app_label": self.opts.app_label,
            "has_view_permission": True,
        }
        return TemplateResponse(request, "admin/resonate/run.html", context)

    # --- columns ---

    @admin.display(description="function · run", ordering="function")
    def function_column(self, p: Promise) -> SafeString:
        """What it runs, and below it the link to its run's timeline (a column of its own
        pushed the table past 1400 px)."""
        return format_html(
            '{}<br><small><a class="resonate-run" href="{}">timeline</a></small>',
            function_html(p),
            self.run_url(p),
        )

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

    @admin.display(description="function")
    def function_view(self, p: Promise) -> SafeString | str:
        return function_html(p)

    @admin.display(description="run")
    def run_view(self, p: Promise) -> SafeString:
        return format_html(
            '<a class="resonate-run" href="{}">the run this promise belongs to, as a timeline</a>',
            self.run_url(p),
        )

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
        return format_html("{} {} version {}", self.link(task), state_badge(state), task.version)

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
            name = format_html("<strong>{}</strong>", q.id) if current else self.link(q)
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
            items.append((self.link(q), promise_state_html(q, now), task_html))
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
