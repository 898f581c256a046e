"""The jobs in the admin: a list that stays fast at a million rows, a read-only detail page,
and actions that go through ``operations``.

Jobs are never edited by hand: no add, change or delete; state changes are the actions (POST,
CSRF-protected, permission-checked, audited). What of a job a user sees follows
``disclosure.Clearance``: arguments and results with ``view_job_payload``, tracebacks with
``view_job_traceback``.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from .. import budgets, operations, permissions
from ..conf import workqueue_settings as conf
from ..disclosure import Clearance, journal
from ..models import Checkpoint, Dependency, Job, WorkerProcess
from ..registry import registered_tasks
from . import live_progress
from .disclosed import Disclosed
from .filters import (
    CheckedQueryValues,
    EnqueuedFilter,
    ErrorTypeFilter,
    QueueFilter,
    TaskFilter,
    WorkflowFilter,
)
from .job_actions import ACTIONS, BUTTONS, SIGNALLED, send_signal
from .pagination import EstimatedCountPaginator

_UNCLEARED = Clearance(payload=False, tracebacks=False)

LINKED_JOBS = 100
"""The most prerequisites and dependents the job page lists."""


class PermissionChecks:
    """``has_<action>_permission`` for the actions' ``permissions=[...]``: the one permission
    model (``permissions.allowed``)."""

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "cancel")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "retry")

    def has_redrive_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "redrive")

    def has_hold_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "hold")

    def has_release_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "release")

    def has_purge_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "purge")

    def has_enqueue_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "enqueue")


class ReadOnly(CheckedQueryValues, Disclosed):
    """Rows written by the engine only, read from the jobs database (``WORKQUEUE["DATABASE"]``)
    and seen by whoever may see jobs (``view_job``): the one permission model, rather than a
    view permission per table; what of them is shown, filtered and ordered on follows
    ``disclosure`` (``Disclosed``)."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return super().get_queryset(request).using(conf.DATABASE)  # type: ignore[misc]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return permissions.allowed(request.user, "view")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "view")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(PermissionChecks, ReadOnly, admin.ModelAdmin):
    list_display = [
        "id", "task_name", "queue", "status", "priority", "attempt_short", "enqueued_at",
        "finished_at", "workflow_link",
    ]  # fmt: skip
    list_filter = [
        "status", QueueFilter, TaskFilter, WorkflowFilter, ErrorTypeFilter, EnqueuedFilter
    ]  # fmt: skip
    # Sorting by id is served by the primary key; the others sort what the filters leave.
    sortable_by = ["id", "priority", "enqueued_at", "finished_at"]
    search_fields = ["=id", "=task_name", "=unique_key"]
    search_help_text = "A job id, a registered task's full name, or a unique key (exact)."
    actions = list(ACTIONS)
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    list_per_page = 50
    change_form_template = "admin/django_workqueue/job/change_form.html"
    change_list_template = "admin/django_workqueue/job/change_list.html"
    fieldsets = [
        (None, {"fields": [
            "id", "task_name", "queue", "status", "priority", "attempt_summary",
            ("claims", "crashes_charged"),
            "run_after", "deadline", "unique_key", "workflow_link", "run_condition",
            "waiting_on", "flow_key",
        ]}),
        ("Lease", {"fields": [
            "lease_owner", "worker", "lease_seconds", "lease_expires_at", "cancel_requested_at",
        ]}),
        ("Times", {"fields": ["enqueued_at", "started_at", "finished_at"]}),
    ]  # fmt: skip
    readonly_fields = [
        "id", "task_name", "queue", "status", "priority", "attempt", "claims", "max_attempts",
        "attempt_summary", "attempt_short", "crashes_charged", "run_after", "deadline",
        "unique_key", "workflow_link", "run_condition", "waiting_on", "flow_key", "lease_owner",
        "worker", "lease_seconds", "lease_expires_at", "cancel_requested_at", "enqueued_at",
        "started_at", "finished_at", "unique_key_shown", "flow_key_shown",
    ]  # fmt: skip

    @admin.display(description="attempt")
    def attempt_summary(self, job: Job) -> str:
        return budgets.describe_job(job)

    @admin.display(description="attempt")
    def attempt_short(self, job: Job) -> str:
        return budgets.describe_job(job, short=True)

    @admin.display(description="claims")
    def claims(self, job: Job) -> int:
        """The claim counter (``Job.attempt``), which fences each worker's writes; the body's
        attempts are the ``attempt`` line above (budgets.py)."""
        return job.attempt

    @admin.display(description="workflow", ordering="workflow_id")
    def workflow_link(self, job: Job) -> str:
        if job.workflow_id is None:
            return "-"
        url = reverse("admin:django_workqueue_workflow_change", args=[job.workflow_id])
        return format_html('<a href="{}">{}</a>', url, job.workflow_id)

    @admin.display(description="worker")
    def worker(self, job: Job) -> str:
        if not job.lease_owner:
            return "-"
        worker = WorkerProcess.objects.using(job._state.db).filter(pk=job.lease_owner).first()
        if worker is None:
            return "(not registered: stopped, or its row was removed)"
        return f"{worker.host} pid {worker.pid}"

    # Shown instead of the fields (Disclosed.get_fieldsets) to users without view_job_payload.
    @admin.display(description="unique key")
    def unique_key_shown(self, job: Job) -> str:
        return _UNCLEARED.unique_key(job.unique_key) or "-"

    @admin.display(description="flow key")
    def flow_key_shown(self, job: Job) -> str:
        return _UNCLEARED.flow_key(job) or "-"

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        # Exact matches, each served by an index: an id by the primary key, a registered
        # task's name as the task filter does, anything else as a unique key (the partial
        # index wq_job_unique_key). A substring search would read every row.
        term = search_term.strip()
        if not term:
            return queryset, False
        if term.isdigit():
            return queryset.filter(pk=int(term)), False
        if term in registered_tasks():
            return queryset.filter(task_name=term), False
        if not self.clearance(request).searchable(Job, "unique_key", term):
            # A derived key quotes the arguments: matching one would confirm a guess of them.
            return queryset.none(), False
        return queryset.filter(unique_key=term), False

    def get_urls(self) -> list[URLPattern]:
        act = self.admin_site.admin_view(require_POST(self.act_view))
        progress = self.admin_site.admin_view(self.progress_view)
        signal = self.admin_site.admin_view(require_POST(self.signal_view))
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        return [
            path("<int:object_id>/act/<str:action>/", act, name=f"{prefix}_act"),
            path("<int:object_id>/progress/", progress, name=f"{prefix}_progress"),
            path("<int:object_id>/signal/", signal, name=f"{prefix}_signal"),
            *super().get_urls(),
        ]

    def progress_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """The job page's news where there is no websocket (``live_progress``)."""
        job = get_object_or_404(Job.objects.using(self._db()), pk=object_id)
        if not self.has_view_permission(request, job):
            raise PermissionDenied
        return live_progress.progress_view(request, job)

    def act_view(self, request: HttpRequest, object_id: int, action: str) -> HttpResponse:
        """A button of the job page: the admin action on this one job."""
        if action not in BUTTONS:
            raise PermissionDenied(f"unknown job action {action!r}")
        run, needs, _, _ = BUTTONS[action]
        if not permissions.allowed(request.user, needs):
            raise PermissionDenied(permissions.permission(needs))
        job = get_object_or_404(Job.objects.using(self._db()), pk=object_id)
        run(self, request, Job.objects.using(self._db()).filter(pk=job.pk))
        if action == "purge" and not Job.objects.using(self._db()).filter(pk=job.pk).exists():
            return HttpResponseRedirect(reverse("admin:django_workqueue_job_changelist"))
        return HttpResponseRedirect(reverse("admin:django_workqueue_job_change", args=[job.pk]))

    def signal_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """The job page's "send signal" form."""
        if not permissions.allowed(request.user, "signal"):
            raise PermissionDenied(permissions.permission("signal"))
        job = get_object_or_404(Job.objects.using(self._db()), pk=object_id)
        send_signal(request, job)
        return HttpResponseRedirect(reverse("admin:django_workqueue_job_change", args=[job.pk]))

    def _db(self) -> str:
        return str(conf.DATABASE)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        job = (
            Job.objects.using(self._db()).filter(pk=object_id).first()
            if object_id.isdigit()
            else None
        )
        extra = dict(extra_context or {})
        if job is not None and self.has_view_permission(request, job):
            extra.update(job_context(request, job))
        return super().change_view(request, object_id, form_url, extra)


def job_context(request: HttpRequest, job: Job) -> dict[str, Any]:
    """What the job page shows beyond its fields, as the user may see it."""
    clearance = Clearance.of(request.user)
    payload = clearance.payload_of(job)
    shown = {
        key: json.dumps(payload[key], indent=2, sort_keys=True, default=str)
        for key in ("args", "kwargs", "result", "progress_details")
    }
    db = job._state.db
    prerequisites = (
        Dependency.objects.using(db).filter(job=job).order_by("position")
        .values_list("prerequisite_id", "prerequisite__task_name", "prerequisite__status")
    )[:LINKED_JOBS]  # fmt: skip
    dependents = (
        Dependency.objects.using(db).filter(prerequisite=job).order_by("job_id")
        .values_list("job_id", "job__task_name", "job__status")
    )[:LINKED_JOBS]  # fmt: skip
    buttons = [
        (name, label)
        for name, (_, needs, label, statuses) in BUTTONS.items()
        if job.status in statuses and permissions.allowed(request.user, needs)
    ]
    return {
        "wq_job": job,
        **live_progress.context(job),
        "wq_payload_hidden": payload["payload_hidden"],
        "wq_shown": shown,
        "wq_errors": list(reversed(clearance.errors(job.errors))),
        "wq_tracebacks": clearance.tracebacks,
        "wq_progress_message": clearance.text(job.progress_message),
        "wq_prerequisites": list(prerequisites),
        "wq_dependents": list(dependents),
        "wq_buttons": buttons,
        "wq_explanation": operations.explain(job, clearance=clearance, alias=db),
        "wq_journal": _journal(job, clearance),
        "wq_signal": job.status in SIGNALLED and permissions.allowed(request.user, "signal"),
        "wq_waits_for": (
            Checkpoint.objects.using(db)
            .filter(job=job, kind=Checkpoint.Kind.WAIT, result__isnull=True)
            .values_list("signal", flat=True)
            .last()
        ),
    }


def _journal(job: Job, clearance: Clearance) -> dict[str, Any]:
    """``disclosure.journal`` with each step's result and signal's payload as JSON text."""
    shown = journal(job, clearance)
    for row in shown["steps"]:
        row["json"] = json.dumps(row["result"], sort_keys=True, default=str)
    for row in shown["signals"]:
        row["json"] = json.dumps(row["payload"], sort_keys=True, default=str)
    return shown
