from django.db import migrations, models


def route(address):
    """``outbox.delivery.poll_route`` as of this migration (frozen here on purpose)."""
    if not address.startswith("poll://"):
        return None
    mode, sep, rest = address[len("poll://") :].partition("@")
    if not sep or mode not in ("uni", "any") or not rest:
        return None
    group, _, stream_id = rest.partition("/")
    if not group:
        return None
    if mode == "any":
        return group
    return f"{group}/{stream_id}" if stream_id else None


def backfill(apps, schema_editor):
    """Rows written before the column existed: without a route no SSE hub would claim them."""
    Message = apps.get_model("outbox", "Message")
    rows = Message.objects.filter(address__startswith="poll://", poll_route__isnull=True)
    for key, address in list(rows.values_list("key", "address")):
        r = route(address)
        if r is not None:
            Message.objects.filter(key=key).update(poll_route=r)


class Migration(migrations.Migration):
    dependencies = [
        ("outbox", "0003_message_act_permission"),
    ]

    operations = [
        migrations.AddField(
            model_name="message",
            name="poll_route",
            field=models.TextField(
                blank=True,
                help_text="poll:// messages: what the SSE hub claims them by (delivery.poll_route)",
                null=True,
            ),
        ),
        migrations.AddIndex(
            model_name="message",
            index=models.Index(
                condition=models.Q(("poll_route__isnull", False)),
                fields=["poll_route", "next_attempt_at"],
                name="outbox_poll_due",
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop, elidable=True),
    ]
