"""A host's ``AdminSite`` with the promises' admin alone (no tasks, no outbox): the run page
still renders, naming what it cannot link to."""

from django.contrib import admin
from django.urls import path

from promises.admin import PromiseAdmin
from promises.models import Promise


class PromisesSite(admin.AdminSite):
    site_header = "promises only"


site = PromisesSite(name="promises_only")
site.register(Promise, PromiseAdmin)

urlpatterns = [path("ops/", site.urls)]
