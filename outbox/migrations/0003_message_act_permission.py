from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("outbox", "0002_subscriber"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="message",
            options={"permissions": [("act_on_message", "Can re-send outbox messages from the admin")]},
        ),
    ]
