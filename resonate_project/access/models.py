"""Service credentials: Django-native bearer tokens for teams without a JWT issuer."""

from __future__ import annotations

from django.db import models


class ServiceCredential(models.Model):
    """A named bearer token. Only its SHA-256 is stored (the token is 256 random bits, so a fast
    hash is as safe as a slow one and costs nothing per request); the token itself is shown once,
    when it is created. Times are milliseconds, like every protocol time."""

    name = models.CharField(max_length=100, unique=True)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.TextField(
        blank=True, default="", help_text="every id a request names must start with this"
    )
    groups = models.JSONField(
        default=list, blank=True, help_text="poll groups it may stream; empty: any group"
    )
    # db_default: the release before this column inserts credentials without it (upgrades run
    # the migrations while that release still serves).
    push_hosts = models.JSONField(
        default=list,
        db_default=[],
        blank=True,
        help_text="hosts (or *.domains) its http(s) addresses may name; empty: any host if it "
        "may use any group, none if it is limited to groups",
    )
    admin = models.BooleanField(default=False, help_text="may do anything, debug included")
    created_at = models.BigIntegerField(editable=False)
    last_used_at = models.BigIntegerField(null=True, blank=True, editable=False)
    revoked_at = models.BigIntegerField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
