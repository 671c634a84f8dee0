"""Retention's two indexes (engine/retention.py). On PostgreSQL they are built CONCURRENTLY, so a
running server keeps writing promises while a large table is indexed (hence atomic = False)."""

import django.db.models.fields.json
from django.db import migrations, models


class AddIndexOnline(migrations.AddIndex):
    """AddIndex, CONCURRENTLY on PostgreSQL (SQLite has no such thing and needs none)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)
        return None

    def database_backwards(self, app_label, schema_editor, from_state, to_state):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor != "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, concurrently=True)
        return None


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
