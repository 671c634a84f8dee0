from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("schedules", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="schedule",
            options={"permissions": [("act_on_schedule", "Can fire and delete schedules from the admin")]},
        ),
    ]
