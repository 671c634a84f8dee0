"""``parent`` and ``function`` as columns (the console's call tree, filters and per-function
charts), filled in for the promises stored before them. Online (resonate_project.schema): the
columns are nullable, the fill commits 1,000 rows at a time instead of holding one transaction
over the table, and the indexes are built CONCURRENTLY on PostgreSQL, so a running server keeps
writing meanwhile. Promises the previous release writes while this runs get no function or
parent (it does not know them): the admin shows such a promise as a root without a name."""

from typing import Any

from django.db import migrations, models

from resonate_project.core.calls import function_name
from resonate_project.schema import AddIndexOnline

BATCH = 1000  # rows read and written per round trip while filling the new columns


def fill(apps: Any, schema_editor: Any) -> None:
    Promise = apps.get_model("promises", "Promise")
    db = schema_editor.connection.alias
    rows = Promise.objects.using(db).order_by("pk").values_list("pk", "tags", "param_data")
    batch: list[Any] = []
    for pk, tags, data in rows.iterator(chunk_size=BATCH):
        tags = tags if isinstance(tags, dict) else {}
        parent = tags.get("resonate:parent")
        function = function_name(data) if "resonate:target" in tags else None
        if parent is None and function is None:
            continue
        batch.append(Promise(pk=pk, parent=parent, function=function))
        if len(batch) >= BATCH:
            Promise.objects.using(db).bulk_update(batch, ["parent", "function"])
            batch = []
    if batch:
        Promise.objects.using(db).bulk_update(batch, ["parent", "function"])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("promises", "0002_promise_act_permission"),
    ]

    operations = [
        migrations.AddField(
            model_name="promise",
            name="function",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="promise",
            name="parent",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop, elidable=True),
        AddIndexOnline(
            model_name="promise",
            index=models.Index(
                condition=models.Q(("parent__isnull", False)),
                fields=["parent"],
                name="promise_parent",
            ),
        ),
        AddIndexOnline(
            model_name="promise",
            index=models.Index(
                condition=models.Q(("function__isnull", False)),
                fields=["function", "created_at"],
                name="promise_function",
            ),
        ),
    ]
