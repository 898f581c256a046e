"""Workflows in the admin: their status and counters, and the graph of their jobs drawn as SVG
on the server. Cancelling one goes through ``operations.cancel_workflow``."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from .. import audit, operations, permissions
from ..conf import workqueue_settings as conf
from ..models import Workflow
from ..workflow.layout import workflow_graph
from .jobs import ReadOnly
from .pagination import EstimatedCountPaginator
from .svg import STATUS_COLOURS, workflow_svg


@admin.action(description="Cancel selected workflows", permissions=["cancel"])
def cancel_workflows(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Workflow]) -> None:
    """Cancel each workflow (``operations.cancel_workflow``), at most 1,000 per action."""
    permissions.require(request.user, "cancel")
    ids = list(queryset.values_list("pk", flat=True)[:1000])
    changed = sum(operations.cancel_workflow(pk, alias=queryset.db).count for pk in ids)
    audit.record(request.user, "cancel_workflow", {"workflow_ids": ids}, changed, "admin",
                 alias=queryset.db)  # fmt: skip
    level = messages.SUCCESS if changed else messages.WARNING
    messages.add_message(request, level, f"{changed} job(s) of {len(ids)} workflow(s) cancelled.")


@admin.register(Workflow)
class WorkflowAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["id", "name", "status", "total", "open", "succeeded", "failed", "cancelled",
                    "created_at", "finished_at"]  # fmt: skip
    list_filter = ["status"]
    sortable_by = ["id"]
    search_fields = ["=id", "=name"]
    actions = [cancel_workflows]
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    readonly_fields = ["id", "name", "status", "total", "open", "succeeded", "failed",
                       "cancelled", "created_at", "finished_at", "cancel_requested_at",
                       "jobs_link"]  # fmt: skip
    fields = [*readonly_fields]
    change_form_template = "admin/django_workqueue/workflow/change_form.html"

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "cancel")

    def get_urls(self) -> list[URLPattern]:
        cancel = self.admin_site.admin_view(require_POST(self.cancel_view))
        name = f"{self.opts.app_label}_{self.opts.model_name}_cancel"
        return [path("<int:object_id>/cancel/", cancel, name=name), *super().get_urls()]

    def cancel_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """The workflow page's Cancel button: the action on this one workflow."""
        permissions.require(request.user, "cancel")
        workflows = Workflow.objects.using(conf.DATABASE).filter(pk=object_id)
        get_object_or_404(workflows)
        cancel_workflows(self, request, workflows)
        return HttpResponseRedirect(
            reverse("admin:django_workqueue_workflow_change", args=[object_id])
        )

    @admin.display(description="jobs")
    def jobs_link(self, workflow: Workflow) -> str:
        url = reverse("admin:django_workqueue_job_changelist") + f"?workflow={workflow.pk}"
        return format_html('<a href="{}">the {} job(s) of this workflow</a>', url, workflow.total)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        workflow = (
            Workflow.objects.using(conf.DATABASE).filter(pk=object_id).first()
            if object_id.isdigit()
            else None
        )
        if workflow is not None and self.has_view_permission(request, workflow):
            graph = workflow_graph(workflow)
            extra["wq_graph"] = graph
            extra["wq_svg"] = workflow_svg(
                graph, lambda pk: reverse("admin:django_workqueue_job_change", args=[pk])
            )
            extra["wq_colours"] = STATUS_COLOURS.items()
            extra["wq_can_cancel"] = workflow.finished_at is None and permissions.allowed(
                request.user, "cancel"
            )
        return super().change_view(request, object_id, form_url, extra)
