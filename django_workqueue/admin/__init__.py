"""The Django admin of the job queue: jobs, workflows, schedules, queues, workers, the audit
trail and a dashboard (``admin:django_workqueue_dashboard``). Every change goes through
``operations`` and is audited; see ``docs/guides/admin.md``."""

from __future__ import annotations

from django.contrib import admin
from django.urls import URLPattern, URLResolver

from .audit import AuditRecordAdmin
from .dashboard import dashboard_urls
from .jobs import JobAdmin
from .queues import FlowLimitAdmin, QueueAdmin
from .schedules import ScheduleAdmin
from .workers import WorkerProcessAdmin
from .workflows import WorkflowAdmin

__all__ = [
    "AuditRecordAdmin", "FlowLimitAdmin", "JobAdmin", "QueueAdmin", "ScheduleAdmin",
    "WorkerProcessAdmin", "WorkflowAdmin", "dashboard_urls",
]  # fmt: skip


def _with_dashboard(site: admin.AdminSite) -> None:
    """Add the dashboard's URLs to ``site``: a page of the app that is no model's, so no
    ``ModelAdmin`` can hold it. A project with its own ``AdminSite`` adds
    ``dashboard_urls(site)`` to its ``get_urls()`` instead."""
    urls = site.get_urls

    def get_urls() -> list[URLPattern | URLResolver]:
        return [*dashboard_urls(site), *urls()]

    site.get_urls = get_urls  # type: ignore[method-assign]


_with_dashboard(admin.site)
