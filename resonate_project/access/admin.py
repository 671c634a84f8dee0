"""Service credentials in the admin: create (the token is shown once, in the confirmation
message), look at, revoke. A credential's scope is fixed once created: revoke it and create
another to change it."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse

from resonate_project.access.credentials import (
    CredentialError,
    credential_create,
    credential_revoke,
)
from resonate_project.access.models import ServiceCredential
from resonate_project.core.clock import now_ms
from resonate_project.edges.admin.kit import when


class CredentialForm(forms.ModelForm):
    groups_text = forms.CharField(
        label="Groups",
        required=False,
        help_text="poll groups it may stream, comma-separated; empty: any group",
    )

    class Meta:
        model = ServiceCredential
        fields = ["name", "prefix", "admin"]


@admin.register(ServiceCredential)
class ServiceCredentialAdmin(admin.ModelAdmin):
    form = CredentialForm
    list_display = ["name", "scope", "streams", "created", "last_used", "revoked"]
    list_filter = ["admin"]
    search_fields = ["name", "prefix"]
    actions = ["revoke"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        return ["name", "prefix", "admin", "streams", "created", "last_used", "revoked"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["name", "prefix", "groups_text", "admin"]
        return self.get_readonly_fields(request, obj)

    @admin.display(description="scope")
    def scope(self, obj: ServiceCredential) -> str:
        return "admin" if obj.admin else f"prefix {obj.prefix!r}"

    @admin.display(description="streams")
    def streams(self, obj: ServiceCredential) -> str:
        return ", ".join(obj.groups) or "any group"

    @admin.display(description="created")
    def created(self, obj: ServiceCredential) -> Any:
        return when(obj.created_at, now_ms())

    @admin.display(description="last used")
    def last_used(self, obj: ServiceCredential) -> Any:
        return when(obj.last_used_at, now_ms())

    @admin.display(description="revoked")
    def revoked(self, obj: ServiceCredential) -> Any:
        return when(obj.revoked_at, now_ms())

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            return  # nothing is editable once created
        groups = [g.strip() for g in form.cleaned_data.get("groups_text", "").split(",")]
        try:
            credential, token = credential_create(
                name=obj.name,
                now=now_ms(),
                prefix=obj.prefix,
                groups=[g for g in groups if g],
                admin=obj.admin,
            )
        except CredentialError as exc:
            messages.error(request, str(exc))
            return
        obj.pk = credential.pk
        obj.created_at = credential.created_at
        request._resonate_token = token  # type: ignore[attr-defined]  # shown by response_add

    def response_add(self, request: HttpRequest, obj: Any, post_url_continue: Any = None) -> Any:
        token = getattr(request, "_resonate_token", None)
        if token is None:
            return HttpResponseRedirect(
                reverse(
                    "admin:access_servicecredential_changelist", current_app=self.admin_site.name
                )
            )
        context = {
            **self.admin_site.each_context(request),
            "title": "Credential created",
            "credential": obj,
            "token": token,
            "back": reverse(
                "admin:access_servicecredential_changelist", current_app=self.admin_site.name
            ),
        }
        response = TemplateResponse(request, "admin/access/token_created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke the selected credentials", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ServiceCredential]) -> None:
        now = now_ms()
        for credential in queryset:
            credential_revoke(name=credential.name, now=now)
        messages.success(request, f"revoked {queryset.count()} credential(s)")
