"""The job list's filters. Each offers fixed choices (statuses, the configured queues, the
registered tasks, a few time ranges), never the distinct values of a column: a ``SELECT
DISTINCT`` over a million jobs would read them all to draw the sidebar.

Every list of the app checks its query string first (``CheckedQueryValues``): a value no query
can take (a NUL, an id beyond 64 bits) is an invalid lookup, as Django's admin treats one."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from ..conf import workqueue_settings as conf
from ..disclosure import error_type_filter
from ..exceptions import InvalidFilterValue
from ..filter_values import object_id, query_value
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
        try:
            return queryset.filter(workflow_id=object_id(value, "workflow"))
        except InvalidFilterValue as exc:
            raise IncorrectLookupParameters(str(exc)) from None


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


class CheckedValues:
    """A change list's mix-in that checks every value of its query string (filters and
    search) with ``filter_values.query_value`` before building its query. A bad one raises
    ``IncorrectLookupParameters``, Django's answer to an invalid lookup: the admin redirects
    to the list without filters (``?e=1``)."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> Any:
        for name, values in request.GET.lists():
            for value in values:
                try:
                    query_value(value, name)
                except InvalidFilterValue as exc:
                    raise IncorrectLookupParameters(str(exc)) from None
        return super().get_queryset(request, exclude_parameters)  # type: ignore[misc]


@functools.cache
def checked(changelist: type[ChangeList]) -> type[ChangeList]:
    """``changelist`` with ``CheckedValues``: whichever list class a model admin chose."""
    return type(f"Checked{changelist.__name__}", (CheckedValues, changelist), {})


class CheckedQueryValues:
    """The mix-in of the app's model admins: their lists check their query strings
    (``CheckedValues``)."""

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return checked(super().get_changelist(request, **kwargs))  # type: ignore[misc]
