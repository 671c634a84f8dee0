"""The tasks app's two consoles, registered with the admin when Django discovers this package:
Resonate's tasks (``task.py``) and the calls enqueued through Django's Tasks framework
(``job.py``)."""

from tasks_app.admin.job import JobAdmin
from tasks_app.admin.task import TaskAdmin

__all__ = ["JobAdmin", "TaskAdmin"]
