"""The job list's filters. Each offers fixed choices (statuses, the configured queues, the
registered tasks, a few time ranges), never the distinct values of a column: a ``SELECT
DISTINCT`` over a million jobs would read them all to draw the sidebar."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ..conf import workqueue_settings as conf
from ..disclosure import error_type_filter
from ..registry import registered_tasks
from ..states import Status
from .deadletters import dead_letter_groups


class QueueFilter(admin.SimpleListFilter):
    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in conf.QUEUES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(queue=self.value()) if self.value() else queryset


class TaskFilter(admin.SimpleListFilter):
    title = "task"
    parameter_name = "task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in sorted(registered_tasks())]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(task_name=self.value()) if self.value() else queryset


class WorkflowFilter(admin.SimpleListFilter):
    """Jobs of one workflow, chosen by following a workflow's "jobs" link: the sidebar lists
    only the chosen one, never every workflow."""

    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        return [(value, f"workflow {value}")] if value and value.isdigit() else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        return queryset.filter(workflow_id=int(value)) if value.isdigit() else queryset.none()


FILTER_SAMPLE = 100
"""How many of the newest failed jobs the error type filter reads for its choices."""


class ErrorTypeFilter(admin.SimpleListFilter):
    """Failed jobs with a recorded error of a type. The choices are the last error
    types of the ``FILTER_SAMPLE`` newest failed jobs (``deadletters.dead_letter_groups``),
    not a scan; any type can be given in the URL (``?error_type=...``)."""

    title = "error type"
    parameter_name = "error_type"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        jobs = model_admin.model.objects.db_manager(conf.DATABASE).all()
        groups = dead_letter_groups(jobs, recent=FILTER_SAMPLE)
        chosen = self.value()
        types = [group.error_type for group in groups]
        if chosen and chosen not in types:
            types.append(chosen)
        return [(name, name) for name in types]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        # On the type only: a match on any text of the errors would let a viewer test
        # guesses of what disclosure hides.
        return queryset.filter(error_type_filter(value), status=Status.FAILED)


_RANGES = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}


class EnqueuedFilter(admin.SimpleListFilter):
    """Jobs enqueued within the last hour, day or week."""

    title = "enqueued"
    parameter_name = "enqueued"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("1h", "Last hour"), ("24h", "Last 24 hours"), ("7d", "Last 7 days")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        age = _RANGES.get(self.value() or "")
        return queryset.filter(enqueued_at__gte=timezone.now() - age) if age else queryset
