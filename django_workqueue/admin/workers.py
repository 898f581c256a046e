"""Live workers in the admin, read-only: where each runs, its slots, what it runs, and how long
ago its last heartbeat was (a stale one has stopped or hangs; its leases recover its jobs)."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone

from ..models import WorkerProcess
from .jobs import ReadOnly


@admin.register(WorkerProcess)
class WorkerProcessAdmin(ReadOnly, admin.ModelAdmin):
    list_display = ["id", "host", "pid", "queue_names", "concurrency", "running",
                    "heartbeat_age", "started_at"]  # fmt: skip
    search_fields = ["=id", "host"]
    readonly_fields = [field.name for field in WorkerProcess._meta.fields] + ["heartbeat_age"]

    @admin.display(description="queues")
    def queue_names(self, worker: WorkerProcess) -> str:
        return ", ".join(str(name) for name in worker.queues or [])

    @admin.display(description="last heartbeat", ordering="last_seen_at")
    def heartbeat_age(self, worker: WorkerProcess) -> str:
        seconds = (timezone.now() - worker.last_seen_at).total_seconds()
        return f"{max(seconds, 0):.0f} s ago"
