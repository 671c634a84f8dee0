"""Migration operations for a schema that changes while the server serves
(docs/how-to/upgrading.md).

Upgrades run the new release's migrations while the previous release still serves, so every
migration must leave a schema that release can use (``tests/system/test_upgrade.py``) and
must not hold a lock that stops its writes for long
(``tests/release/test_migrations_online.py`` lints every migration since the previous release).
On PostgreSQL an index on a table that may be large is therefore built ``CONCURRENTLY``, outside
a transaction (the migration sets ``atomic = False``); SQLite has no such thing and needs none
(one process writes at a time anyway).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations


class AddIndexOnline(migrations.AddIndex):
    """``AddIndex``, ``CONCURRENTLY`` on PostgreSQL."""

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        model = to_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.add_index(model, self.index, concurrently=True)

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
            return
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            schema_editor.remove_index(model, self.index, concurrently=True)
