"""Schedules (spec §1.3). Fired by the schedule step when ``next_run_at`` is due."""

from __future__ import annotations

from django.db import models

from resonate_project.core.limits import CRON_MAX_LENGTH, ID_MAX_LENGTH


class Schedule(models.Model):
    id = models.CharField(primary_key=True, max_length=ID_MAX_LENGTH)
    cron = models.CharField(max_length=CRON_MAX_LENGTH)
    promise_id = models.TextField(help_text="id template: {{.id}} and {{.timestamp}} expand")
    promise_timeout = models.BigIntegerField()
    promise_param_headers = models.JSONField(null=True, blank=True)
    promise_param_data = models.TextField(null=True, blank=True)
    promise_tags = models.JSONField(default=dict, blank=True)
    created_at = models.BigIntegerField()
    next_run_at = models.BigIntegerField()
    last_run_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["next_run_at"], name="schedule_due")]
        permissions = [("act_on_schedule", "Can fire and delete schedules from the admin")]

    def __str__(self) -> str:
        return self.id
