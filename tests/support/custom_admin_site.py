"""A host's URLconf with its own ``AdminSite`` (docs/how-to/embedding.md): the apps' admin classes
registered on it, mounted beside the default admin."""

from django.contrib import admin
from django.urls import include, path

from outbox.admin import MessageAdmin
from outbox.models import Message
from promises.admin import PromiseAdmin
from promises.models import Promise
from schedules.admin import ScheduleAdmin
from schedules.models import Schedule
from tasks_app.admin import TaskAdmin
from tasks_app.models import Task


class OpsSite(admin.AdminSite):
    site_header = "the host's operations"


ops = OpsSite(name="ops")
ops.register(Promise, PromiseAdmin)
ops.register(Task, TaskAdmin)
ops.register(Schedule, ScheduleAdmin)
ops.register(Message, MessageAdmin)

urlpatterns = [
    path("ops/", ops.urls),
    path("admin/", admin.site.urls),
    path("resonate/", include("resonate_project.embed.urls")),
]
