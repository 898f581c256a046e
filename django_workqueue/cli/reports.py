"""What the read-only subcommands show, as plain data: the ``--json`` output, and what
``tables`` renders. Times are ISO 8601 in UTC. What of a job is shown follows the user's
``disclosure.Clearance`` (everything for the shell's authority).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import Count, QuerySet

from .. import budgets, operations
from ..conf import workqueue_settings as conf
from ..disclosure import Clearance, journal
from ..models import Dependency, Job, Queue, WorkerProcess
from ..states import Status

STATUSES: tuple[str, ...] = tuple(Status.values)


def timestamp(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat()


def status_counts(alias: str) -> dict[str, dict[str, int]]:
    """Jobs per queue and status.

    A seam: this is one ``GROUP BY`` over the jobs table, exact but a full scan on a large
    table; the per-queue counts of ``django_workqueue.stats.snapshot()`` (rolling counters)
    can replace it, keeping this shape.
    """
    counts: dict[str, dict[str, int]] = {}
    rows = (
        Job.objects.using(alias).order_by().values_list("queue", "status").annotate(n=Count("pk"))
    )
    for queue, status, n in rows:
        counts.setdefault(queue, dict.fromkeys(STATUSES, 0))[status] = n
    return counts


def status(alias: str) -> dict[str, Any]:
    """``workqueue status``: jobs per queue and status, paused queues, live workers."""
    counts = status_counts(alias)
    paused = set(
        Queue.objects.using(alias).filter(paused_at__isnull=False).values_list("name", flat=True)
    )
    names = [*conf.QUEUES, *sorted(set(counts) - set(conf.QUEUES))]
    queues = [
        {
            "name": name,
            "paused": name in paused,
            "counts": counts.get(name, dict.fromkeys(STATUSES, 0)),
        }
        for name in names
    ]
    totals = {status: sum(q["counts"][status] for q in queues) for status in STATUSES}
    return {"queues": queues, "totals": totals, "workers": workers(alias)}


def workers(alias: str) -> list[dict[str, Any]]:
    """``workqueue workers``: the live workers (``operations.workers()``), oldest first."""
    rows = operations.workers(alias=alias).order_by("started_at", "id")
    return [worker(row) for row in rows]


def worker(row: WorkerProcess) -> dict[str, Any]:
    return {
        "id": row.id,
        "host": row.host,
        "pid": row.pid,
        "queues": list(row.queues),
        "slots": row.concurrency,
        "slots_range": (
            [row.concurrency_min, row.concurrency_max] if row.concurrency_max is not None else None
        ),
        "running": row.running,
        "started_at": timestamp(row.started_at),
        "last_seen_at": timestamp(row.last_seen_at),
    }


def job_rows(jobs: QuerySet[Job], limit: int, clearance: Clearance) -> list[dict[str, Any]]:
    """``workqueue jobs``: the newest ``limit`` jobs of the selection."""
    return [job_row(job, clearance) for job in jobs.order_by("-id")[:limit]]


def job_row(job: Job, clearance: Clearance) -> dict[str, Any]:
    errors = clearance.shown(Job, "errors", job.errors[-1:] if job.errors else [])
    last = errors[-1] if errors else None
    return {
        "id": job.pk,
        "task": job.task_name,
        "queue": job.queue,
        "status": job.status,
        "priority": job.priority,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "attempts_charged": job.attempts_charged,
        "crashes_charged": job.crashes_charged,
        "redriven_attempts": job.redriven_attempts,
        "attempt_summary": budgets.describe_job(job),
        "enqueued_at": timestamp(job.enqueued_at),
        "run_after": timestamp(job.run_after),
        "started_at": timestamp(job.started_at),
        "finished_at": timestamp(job.finished_at),
        "workflow": job.workflow_id,
        "last_error": None if last is None else {k: last.get(k) for k in ("type", "message")},
    }


def job_detail(job: Job, clearance: Clearance, *, tracebacks: bool = False) -> dict[str, Any]:
    """``workqueue show ID``: every field an operator asks about, as ``clearance`` may see
    it; errors' tracebacks only when asked for (``--tracebacks``)."""
    db = job._state.db or conf.DATABASE
    edges = Dependency.objects.using(db)
    payload = clearance.payload_of(job)
    return {
        **job_row(job, clearance),
        "args": payload["args"],
        "kwargs": payload["kwargs"],
        "result": payload["result"],
        "payload_hidden": payload["payload_hidden"],
        "unique_key": clearance.unique_key(job.unique_key),
        "flow_key": clearance.flow_key(job),
        "deadline": timestamp(job.deadline),
        "lease_owner": job.lease_owner,
        "lease_expires_at": timestamp(job.lease_expires_at),
        "cancel_requested_at": timestamp(job.cancel_requested_at),
        "progress": {
            "current": job.progress_current,
            "total": job.progress_total,
            "message": clearance.shown(Job, "progress_message", job.progress_message),
            "details": payload["progress_details"],
        },
        "prerequisites": list(
            edges.filter(job=job).order_by("position").values_list("prerequisite_id", flat=True)
        ),
        "dependents": list(
            edges.filter(prerequisite=job).order_by("job_id").values_list("job_id", flat=True)
        ),
        "errors": [
            {key: value for key, value in error.items() if tracebacks or key != "traceback"}
            for error in clearance.shown(Job, "errors", job.errors)
        ],
        "journal": _journal(job, clearance),
    }


def _journal(job: Job, clearance: Clearance) -> dict[str, Any]:
    """``disclosure.journal`` with its times as text."""
    shown = journal(job, clearance)
    for row in (*shown["steps"], *shown["signals"]):
        for key, value in row.items():
            if isinstance(value, datetime):
                row[key] = timestamp(value)
    return shown
