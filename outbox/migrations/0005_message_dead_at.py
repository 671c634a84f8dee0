from django.db import migrations, models


class Migration(migrations.Migration):
    """Dead letters: a push message that ran out of attempts or age keeps its row, with
    ``dead_at`` set, and is never claimed again until re-sent or replaced."""

    dependencies = [
        ("outbox", "0004_message_poll_route"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="dead_at",
            field=models.BigIntegerField(
                blank=True,
                help_text="ms: when it was dead-lettered (no more attempts)",
                null=True,
            ),
        ),
        migrations.RemoveIndex(model_name="message", name="outbox_due"),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("dead_at__isnull", True)),
                fields=["next_attempt_at"],
                name="outbox_due",
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("dead_at__isnull", False)),
                fields=["dead_at"],
                name="outbox_dead",
            ),
        ),
    ]
