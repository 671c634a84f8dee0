"""Retention's two indexes (engine/retention.py), built CONCURRENTLY on PostgreSQL so a running
server keeps writing promises while a large table is indexed (resonate_project.schema)."""

import django.db.models.fields.json
from django.db import migrations, models

from resonate_project.schema import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("promises", "0003_promise_parent_function"),
    ]

    operations = [
        AddIndexOnline(
            model_name="promise",
            index=models.Index(
                condition=models.Q(("settled_at__isnull", False)),
                fields=["settled_at", "id"],
                name="promise_settled",
            ),
        ),
        AddIndexOnline(
            model_name="promise",
            index=models.Index(
                django.db.models.fields.json.KeyTextTransform("resonate:origin", "tags"),
                name="promise_origin",
            ),
        ),
    ]
