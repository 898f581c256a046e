"""Queues in the admin: every configured queue (``WORKQUEUE["QUEUES"]``) with its paused state
and what waits in it, pause and resume (``operations.pause_queue`` / ``resume_queue``, needing
``manage_queue``), and the flow limits' rows, read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from .. import audit, operations, permissions, stats
from ..conf import workqueue_settings as conf
from ..disclosure import Clearance
from ..exceptions import UnknownQueue
from ..models import FlowLimit, Queue
from .jobs import ReadOnly


@admin.register(Queue)
class QueueAdmin(ReadOnly, admin.ModelAdmin):
    """The list is the configured queues, not the ``Queue`` rows (a queue has a row only once
    it has been paused)."""

    def get_urls(self) -> list[URLPattern]:
        toggle = self.admin_site.admin_view(require_POST(self.toggle_view))
        name = f"{self.opts.app_label}_{self.opts.model_name}_toggle"
        return [path("<str:name>/<str:verb>/", toggle, name=name), *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        db = conf.DATABASE
        paused = dict(
            Queue.objects.using(db).filter(paused_at__isnull=False).values_list("name", "paused_at")
        )
        snap = stats.snapshot(alias=db)
        rows = []
        for name in sorted(set(conf.QUEUES) | set(paused)):
            queue_stats = snap.queue(name)
            rows.append({
                "name": name, "paused_at": paused.get(name), "configured": name in conf.QUEUES,
                "counts": dict(queue_stats.counts) if queue_stats else {},
                "backlog": queue_stats.backlog if queue_stats else 0,
                "oldest_ready_age": queue_stats.oldest_ready_age if queue_stats else None,
            })  # fmt: skip
        context = {
            **self.admin_site.each_context(request),
            "title": "Queues", "opts": self.opts, "wq_queues": rows,
            "wq_can_manage": permissions.allowed(request.user, "pause"),
            "wq_limits": flow_limits(request, db),
            **(extra_context or {}),
        }  # fmt: skip
        return TemplateResponse(request, "admin/django_workqueue/queue/change_list.html", context)

    def toggle_view(self, request: HttpRequest, name: str, verb: str) -> HttpResponse:
        if verb not in ("pause", "resume"):
            raise PermissionDenied(f"unknown queue action {verb!r}")
        permissions.require(request.user, verb)
        operation = operations.pause_queue if verb == "pause" else operations.resume_queue
        try:
            result = operation(name)
        except UnknownQueue as exc:
            messages.error(request, str(exc))
        else:
            audit.record(request.user, verb, {"queues": [name]}, result.count, "admin")
            messages.add_message(
                request, messages.SUCCESS if result else messages.WARNING, result.message
            )
        return HttpResponseRedirect(reverse("admin:django_workqueue_queue_changelist"))


def flow_limits(request: HttpRequest, db: str) -> list[dict[str, Any]]:
    """The first 200 flow limits' rows, their keys as the user may see them: in key order when
    the user sees the keys, else by last use, a hidden key masked and unlinked."""
    clearance = Clearance.of(request.user)
    cleared = clearance.may_see(FlowLimit, "key")
    rows = FlowLimit.objects.using(db).order_by("key" if cleared else "-updated_at")[:200]
    shown = []
    for row in rows:
        key = clearance.shown(FlowLimit, "key", row.key)
        link = key == row.key  # the page's address is the key
        shown.append({
            "key": key, "pk": row.pk if link else None, "starts": row.starts,
            "updated_at": row.updated_at,
        })  # fmt: skip
    return shown


@admin.register(FlowLimit)
class FlowLimitAdmin(ReadOnly, admin.ModelAdmin):
    """A limit's key quotes what the task's ``limit_key`` made of a job's arguments: users
    without ``view_job_payload`` see it as ``limit:<task>:(hidden)``, unlinked, in the order
    the rows were last used."""

    list_display = ["key", "updated_at", "recent_starts"]
    search_fields = ["=key"]
    readonly_fields = ["key", "starts", "updated_at"]
    uncleared_ordering = ("-updated_at",)

    @admin.display(description="key")
    def key_shown(self, limit: FlowLimit) -> str:
        return str(Clearance(payload=False, tracebacks=False).shown(FlowLimit, "key", limit.key))

    @admin.display(description="starts in the rate period")
    def recent_starts(self, limit: FlowLimit) -> int:
        return sum(int(n) for _, n in limit.starts or [])
