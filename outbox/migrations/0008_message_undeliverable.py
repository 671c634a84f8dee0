"""Undeliverable messages. The index is built CONCURRENTLY on PostgreSQL (resonate_project.schema), so
the previous release keeps writing the outbox meanwhile."""

from django.db import migrations, models

from resonate_project.schema import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('outbox', '0007_quarantine'),
    ]

    operations = [
        migrations.AddField(
            model_name='message',
            name='undeliverable_at',
            field=models.BigIntegerField(blank=True, help_text='ms: when it was set aside as undeliverable (a poll://uni@ address with no stream for UNDELIVERABLE_AFTER_MS; dead_at is set too), until that stream connects', null=True),
        ),
        AddIndexOnline(
            model_name='message',
            index=models.Index(condition=models.Q(('undeliverable_at__isnull', False)), fields=['poll_route'], name='outbox_undeliverable'),
        ),
    ]
