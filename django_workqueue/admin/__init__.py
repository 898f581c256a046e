"""The Django admin of the job queue: jobs, workflows, schedules, queues, workers, the audit
trail and a dashboard (``admin:django_workqueue_dashboard``). Every change goes through
``operations`` and is audited; see ``docs/guides/admin.md``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import URLPattern, URLResolver

from .. import permissions
from .audit import AuditRecordAdmin
from .dashboard import APP_LABEL, dashboard_entry, dashboard_urls
from .jobs import JobAdmin
from .queues import FlowLimitAdmin, QueueAdmin
from .schedules import ScheduleAdmin
from .workers import WorkerProcessAdmin
from .workflows import WorkflowAdmin

__all__ = [
    "AuditRecordAdmin", "FlowLimitAdmin", "JobAdmin", "QueueAdmin", "ScheduleAdmin",
    "WorkerProcessAdmin", "WorkflowAdmin", "dashboard_entry", "dashboard_urls",
]  # fmt: skip


def _with_dashboard(site: admin.AdminSite) -> None:
    """Add the dashboard to ``site``: its URLs (a page of the app that is no model's, so no
    ``ModelAdmin`` can hold it), and its entry first in the app's list, which the admin index,
    the app's index and the sidebar show, for users who may view jobs. A project with its own
    ``AdminSite`` calls ``_with_dashboard(site)`` on it, or adds ``dashboard_urls(site)`` to
    its ``get_urls()`` and ``dashboard_entry`` to its app list."""
    urls, build_app_dict = site.get_urls, site._build_app_dict

    def get_urls() -> list[URLPattern | URLResolver]:
        return [*dashboard_urls(site), *urls()]

    def _build_app_dict(request: HttpRequest, label: Any = None) -> dict[str, Any]:
        apps = build_app_dict(request, label)
        ours = apps.get(APP_LABEL)
        if ours and permissions.allowed(request.user, "view"):
            ours["models"] = [dashboard_entry(site), *ours["models"]]
        return apps

    site.get_urls = get_urls  # type: ignore[method-assign]
    site._build_app_dict = _build_app_dict  # type: ignore[method-assign]


_with_dashboard(admin.site)
