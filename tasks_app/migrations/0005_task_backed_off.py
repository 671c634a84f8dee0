"""The backed-off tasks' index, built CONCURRENTLY on PostgreSQL (resonate_project.schema), so the
previous release keeps writing tasks meanwhile."""

from django.db import migrations, models

from resonate_project.schema import AddIndexOnline


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('tasks_app', '0004_task_release_backoff'),
    ]

    operations = [
        AddIndexOnline(
            model_name='task',
            index=models.Index(condition=models.Q(('release_count__gte', 2), ('state', 'pending')), fields=['retry_at'], name='task_backed_off'),
        ),
    ]
