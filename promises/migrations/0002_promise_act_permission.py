from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("promises", "0001_initial"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="promise",
            options={"permissions": [("act_on_promise", "Can settle promises from the admin")]},
        ),
    ]
