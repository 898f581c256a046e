"""Every mutating route of the HTTP API, each with the rows it needs and a probe of the change
it makes: the permission matrix and the CSRF tests run over this table."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from django_workqueue import operations
from django_workqueue.models import Job, Queue, Schedule
from django_workqueue.states import Status
from tests.support.api import API
from tests.support.factories import JobFactory


@dataclasses.dataclass(frozen=True)
class Route:
    name: str
    codename: str
    """The one permission it needs."""
    prepare: Callable[[], Any]
    """Makes the rows; returns (path, body)."""
    changed: Callable[[], bool]
    """Whether the route's change happened."""
    status: int = 200


def _job(**fields: Any) -> Job:
    return JobFactory(**fields)


def _status_of() -> str:
    return Job.objects.order_by("id").values_list("status", flat=True).first() or ""


def _on_job(action: str, **fields: Any) -> Callable[[], Any]:
    def prepare() -> Any:
        job = _job(**fields)
        return f"{API}jobs/{job.pk}/{action}/", None

    return prepare


def _paused(name: str) -> bool:
    return Queue.objects.filter(name=name, paused_at__isnull=False).exists()


def _resume_prepare() -> Any:
    operations.pause_queue("mail")
    return f"{API}queues/mail/resume/", None


def _workflow_prepare() -> Any:
    from django_workqueue import chain
    from testproject.testapp.tasks import api_add

    workflow = chain(api_add.s(1), api_add.s()).enqueue()
    return f"{API}workflows/{workflow.pk}/cancel/", None


def _workflow_cancelled() -> bool:
    return set(Job.objects.values_list("status", flat=True)) == {Status.CANCELLED}


def _schedule_prepare() -> Any:
    Schedule.objects.create(
        name="nightly", task_name="testproject.testapp.tasks.scheduled_tick", cron="0 3 * * *"
    )
    return f"{API}schedules/nightly/run/", None


MUTATIONS = [
    Route(
        "enqueue", "add_job",
        lambda: (f"{API}jobs/", {"task": "testproject.testapp.tasks.api_add", "args": [1, 2]}),
        lambda: Job.objects.filter(task_name="testproject.testapp.tasks.api_add").exists(),
        status=201,
    ),
    Route("cancel", "cancel_job", _on_job("cancel"), lambda: _status_of() == Status.CANCELLED),
    Route(
        "retry", "retry_job", _on_job("retry", failed=True), lambda: _status_of() == Status.READY
    ),
    Route("hold", "hold_job", _on_job("hold"), lambda: _status_of() == Status.HELD),
    Route(
        "release", "hold_job", _on_job("release", status=Status.HELD),
        lambda: _status_of() == Status.READY,
    ),
    Route(
        "redrive", "retry_job",
        lambda: (_job(failed=True), (f"{API}jobs/redrive/", {"all": True}))[1],
        lambda: _status_of() == Status.READY,
    ),
    Route("cancel_workflow", "cancel_job", _workflow_prepare, _workflow_cancelled),
    Route(
        "pause", "manage_queue", lambda: (f"{API}queues/mail/pause/", None),
        lambda: _paused("mail"),
    ),
    Route("resume", "manage_queue", _resume_prepare, lambda: not _paused("mail")),
    Route(
        "run_schedule", "manage_schedule", _schedule_prepare,
        lambda: Job.objects.filter(task_name="testproject.testapp.tasks.scheduled_tick").exists(),
        status=201,
    ),
]  # fmt: skip

READS = [
    "jobs/", "jobs/{job}/", "workflows/", "workflows/{workflow}/", "queues/", "schedules/",
    "workers/", "stats/", "schema/",
]  # fmt: skip
