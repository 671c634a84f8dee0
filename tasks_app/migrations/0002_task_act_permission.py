from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("tasks_app", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="task",
            options={"permissions": [("act_on_task", "Can halt, continue and expire tasks from the admin")]},
        ),
    ]
