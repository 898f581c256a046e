"""The audit trail in the admin: every operator change, read-only (records are written by
``audit.record()``, never by hand)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from ..conf import workqueue_settings as conf
from ..models import AuditRecord
from .filters import CheckedQueryValues
from .pagination import EstimatedCountPaginator


@admin.register(AuditRecord)
class AuditRecordAdmin(CheckedQueryValues, admin.ModelAdmin):
    list_display = ["created_at", "actor", "action", "source", "changed"]
    list_filter = ["source"]  # from its choices: no DISTINCT over the trail
    search_fields = ["actor", "action"]
    readonly_fields = ["created_at", "user_pk", "actor", "action", "target", "changed", "source"]
    show_full_result_count = False  # no COUNT(*) over a long trail
    paginator = EstimatedCountPaginator

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditRecord]:
        return super().get_queryset(request).using(conf.DATABASE)  # written beside the jobs

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
