"""Schedules in the admin: edit, enable or disable, and "run now"
(``operations.run_schedule_now``). Changing a schedule needs ``manage_schedule``. A schedule's
arguments are a job's arguments to be: shown, editable and filterable with
``view_job_payload`` only (``disclosure.HIDDEN``); without it the form leaves them be."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import audit, operations, permissions
from ..conf import workqueue_settings as conf
from ..exceptions import WorkqueueError
from ..models import Schedule
from ..schedules import cron_problem, timezone_problem
from .disclosed import Disclosed
from .filters import CheckedQueryValues


class ScheduleForm(forms.ModelForm):
    """Checks the cron expression and the time zone as the settings' schedules are checked."""

    class Meta:
        model = Schedule
        fields = ["name", "task_name", "cron", "timezone", "args", "kwargs", "queue", "enabled",
                  "catch_up"]  # fmt: skip

    def clean_cron(self) -> str:
        cron: str = self.cleaned_data["cron"]
        if problem := cron_problem(cron):
            raise forms.ValidationError(problem)
        return cron

    def clean_timezone(self) -> str:
        name: str = self.cleaned_data["timezone"]
        if problem := timezone_problem(name):
            raise forms.ValidationError(problem)
        return name


def _set_enabled(request: HttpRequest, queryset: QuerySet[Schedule], enabled: bool) -> None:
    permissions.require(request.user, "manage_schedule")
    names = list(queryset.values_list("name", flat=True))
    changed = queryset.exclude(enabled=enabled).update(enabled=enabled)
    action = "enable_schedule" if enabled else "disable_schedule"
    audit.record(request.user, action, {"schedules": names}, changed, "admin", alias=queryset.db)
    messages.success(request, f"{changed} schedule(s) {'enabled' if enabled else 'disabled'}.")


@admin.action(description="Enable selected schedules", permissions=["manage_schedule"])
def enable_schedules(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
    _set_enabled(request, queryset, True)


@admin.action(description="Disable selected schedules", permissions=["manage_schedule"])
def disable_schedules(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
    _set_enabled(request, queryset, False)


@admin.action(description="Run selected schedules now", permissions=["manage_schedule"])
def run_schedules_now(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
    permissions.require(request.user, "run_schedule")
    names = list(queryset.values_list("name", flat=True))
    jobs = []
    for name in names:
        try:
            jobs.append(operations.run_schedule_now(name, alias=queryset.db).pk)
        except WorkqueueError as exc:
            messages.error(request, f"{name}: {exc}")
    audit.record(request.user, "run_schedule", {"schedules": names, "jobs": jobs}, len(jobs),
                 "admin", alias=queryset.db)  # fmt: skip
    messages.success(request, f"{len(jobs)} schedule(s) run now (jobs {jobs}).")


@admin.register(Schedule)
class ScheduleAdmin(CheckedQueryValues, Disclosed, admin.ModelAdmin):
    list_display = ["name", "task_name", "cron", "timezone", "queue", "enabled", "next_run_at",
                    "last_run_at", "source"]  # fmt: skip
    list_filter = ["enabled", "source"]
    search_fields = ["name", "task_name"]
    actions = [enable_schedules, disable_schedules, run_schedules_now]
    form = ScheduleForm
    readonly_fields = ["source", "next_run_at", "last_run_at", "created_at", "updated_at"]

    def has_manage_schedule_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "manage_schedule")

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return permissions.allowed(request.user, "view")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return permissions.allowed(request.user, "view")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_manage_schedule_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_manage_schedule_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_manage_schedule_permission(request)

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        if not change:
            obj.source = "runtime"  # the settings' sync leaves such rows alone
        if {"cron", "timezone"} & set(form.changed_data):
            obj.next_run_at = None  # the scheduler computes the next tick from now
        obj.save(using=conf.DATABASE)
        audit.record(request.user, "change_schedule" if change else "add_schedule",
                     {"schedule": obj.name}, 1, "admin")  # fmt: skip

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        return super().get_queryset(request).using(conf.DATABASE)  # the jobs database

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        name = obj.name
        super().delete_model(request, obj)
        audit.record(request.user, "delete_schedule", {"schedules": [name]}, 1, "admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        """Django's "delete selected" action: one audit record for the schedules it deleted."""
        names = list(queryset.values_list("name", flat=True))
        super().delete_queryset(request, queryset)
        audit.record(request.user, "delete_schedule", {"schedules": names}, len(names), "admin")
