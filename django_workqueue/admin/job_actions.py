"""The job list's actions and the job page's buttons: each calls ``operations``, says how
many jobs it changed, and writes an audit record (source "admin").

Every action is shown only to users who hold its permission (``permissions.ACTIONS``;
``JobAdmin.has_<name>_permission``), and checks it again when it runs. Actions are POSTs with
Django's CSRF protection, like every admin action.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.db.models import QuerySet
from django.http import HttpRequest

from .. import audit, operations, permissions
from ..exceptions import EnqueueError, WorkqueueError
from ..models import Job
from ..operations.jobs import batches
from ..registry import find_task
from ..states import ACTIVE, Status

COPY_LIMIT = 1000
"""The most jobs one "enqueue a copy" copies (a select-all over a large list stops here)."""


def _target(request: HttpRequest, queryset: QuerySet[Job]) -> dict[str, Any]:
    """What the action targeted, for the audit record: the ids chosen, or the list's filter
    when "select all" chose every job it matches."""
    if request.POST.get("select_across") == "1":
        return {"filter": {key: request.GET.getlist(key) for key in request.GET}}
    ids = request.POST.getlist(ACTION_CHECKBOX_NAME)
    chosen = [int(pk) for pk in ids if pk.isdigit()]
    return {"ids": chosen or list(queryset.values_list("pk", flat=True)[: audit.MAX_IDS])}


def _each(
    queryset: QuerySet[Job], statuses: Iterable[str], one: Callable[..., operations.OperationResult]
) -> int:
    """Apply a one-job operation to every job of ``queryset`` in ``statuses``, a batch at a
    time; a job deleted meanwhile counts as unchanged."""
    changed = 0
    for batch in batches(queryset.filter(status__in=list(statuses))):
        for (pk,) in batch:
            try:
                changed += one(pk, alias=queryset.db).count
            except Job.DoesNotExist:
                continue
    return changed


def _run(
    request: HttpRequest,
    queryset: QuerySet[Job],
    action: str,
    verb: str,
    change: Callable[[QuerySet[Job]], int],
    permission: str | None = None,
) -> int:
    """Check the permission (``permission``, or the action's own), change, audit, report."""
    permissions.require(request.user, permission or action)
    target = _target(request, queryset)
    try:
        changed = change(queryset)
    except WorkqueueError as exc:
        messages.error(request, f"{verb}: {exc}")
        return 0
    audit.record(request.user, action, target, changed, "admin", alias=queryset.db)
    level = messages.SUCCESS if changed else messages.WARNING
    messages.add_message(request, level, f"{changed} job(s) {verb}.")
    return changed


@admin.action(description="Cancel selected jobs", permissions=["cancel"])
def cancel_jobs(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]) -> None:
    _run(request, queryset, "cancel", "cancelled (or asked to stop)",
         lambda qs: operations.cancel_jobs(qs).count)  # fmt: skip


@admin.action(description="Retry selected jobs now", permissions=["retry"])
def retry_jobs(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]) -> None:
    _run(request, queryset, "retry", "retried",
         lambda qs: _each(qs, (Status.FAILED, Status.SCHEDULED), operations.retry_job))  # fmt: skip


@admin.action(description="Redrive selected failed jobs", permissions=["redrive"])
def redrive_jobs(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]) -> None:
    _run(request, queryset, "redrive", "redriven", lambda qs: operations.redrive(qs).count)


@admin.action(description="Hold selected waiting jobs", permissions=["hold"])
def hold_jobs(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]) -> None:
    holdable = (Status.BLOCKED, Status.SCHEDULED, Status.READY)
    _run(request, queryset, "hold", "held", lambda qs: _each(qs, holdable, operations.hold_job))


@admin.action(description="Release selected held jobs", permissions=["release"])
def release_jobs(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]) -> None:
    _run(request, queryset, "release", "released",
         lambda qs: _each(qs, (Status.HELD,), operations.release_job))  # fmt: skip


@admin.action(description="Purge selected finished jobs", permissions=["purge"])
def purge_jobs(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]) -> None:
    _run(request, queryset, "purge", "deleted", lambda qs: operations.purge_jobs(qs).count)


@admin.action(description="Enqueue a copy of selected jobs", permissions=["enqueue"])
def enqueue_copies(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Job]) -> None:
    def copy(qs: QuerySet[Job]) -> int:
        copied = 0
        missing: set[str] = set()
        refused: list[str] = []
        rows = qs.order_by("pk").values_list(
            "pk", "task_name", "queue", "priority", "args", "kwargs"
        )
        for pk, task_name, queue, priority, args, kwargs in rows[:COPY_LIMIT]:
            task = find_task(task_name)
            if task is None:
                missing.add(task_name)
                continue
            # One refused copy (arguments that no longer fit, a queue gone from the settings)
            # must not end the action with the copies made before it left out of the audit.
            try:
                job = task.using(queue=queue, priority=priority).enqueue(*args, **kwargs)
            except EnqueueError as exc:
                refused.append(f"job {pk}: {exc}")
                continue
            if not getattr(job, "duplicate", False):  # a unique key's holder came back
                copied += 1
        if missing:
            messages.warning(
                request, f"not copied: no task is registered as {', '.join(sorted(missing))}"
            )
        if refused:
            messages.error(request, f"not copied: {'; '.join(refused[:10])}")
        return copied

    _run(request, queryset, "enqueue_copy", "enqueued as copies", copy, permission="enqueue")


ACTIONS = (
    cancel_jobs, retry_jobs, redrive_jobs, hold_jobs, release_jobs, purge_jobs, enqueue_copies,
)  # fmt: skip
"""The job list's actions, in the order of its menu."""

BUTTONS: dict[str, tuple[Callable[..., None], str, str, tuple[str, ...]]] = {
    "cancel": (cancel_jobs, "cancel", "Cancel", tuple(ACTIVE)),
    "retry": (retry_jobs, "retry", "Retry now", (Status.SCHEDULED,)),
    "redrive": (redrive_jobs, "redrive", "Redrive", (Status.FAILED,)),
    "hold": (hold_jobs, "hold", "Hold", (Status.BLOCKED, Status.SCHEDULED, Status.READY)),
    "release": (release_jobs, "release", "Release", (Status.HELD,)),
    "purge": (purge_jobs, "purge", "Purge", (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)),
    "copy": (enqueue_copies, "enqueue", "Enqueue a copy", tuple(Status.values)),
}
"""The job page's buttons: name → (admin action, permission action, label, the statuses it
applies to)."""


SIGNALLED = tuple(ACTIVE)
"""The statuses of a job the page offers "send signal" for (a finished job refuses one)."""


def send_signal(request: HttpRequest, job: Job) -> None:
    """The job page's "send signal" form: the signal ``name`` with the JSON ``payload``
    (``operations.send_signal``), audited with its name (the payload may be private)."""
    permissions.require(request.user, "signal")
    name = request.POST.get("name", "")
    text = request.POST.get("payload", "").strip()
    try:
        payload = json.loads(text) if text else None
    except ValueError as exc:
        messages.error(request, f"signal not sent: the payload is not JSON ({exc})")
        return
    try:
        result = operations.send_signal(job, name, payload, alias=job._state.db)
    except EnqueueError as exc:  # a bad name, a payload too large
        messages.error(request, f"signal not sent: {exc}")
        return
    target = {"ids": [job.pk], "signal": name}
    audit.record(request.user, "signal", target, result.count, "admin", alias=job._state.db)
    level = messages.SUCCESS if result.count else messages.WARNING
    messages.add_message(request, level, result.message)
