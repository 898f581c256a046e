"""Workflows as tests read them: their counters checked against their jobs, one step at a time."""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any

from django_workqueue.models import Job, Workflow
from django_workqueue.states import TERMINAL

DEPENDENCY_FAILED = "django_workqueue.exceptions.DependencyFailed"
FAILED_EXTERNALLY = "django_workqueue.exceptions.FailedExternally"


def statuses(*jobs: Job) -> list[str]:
    """The status of each job as its row holds it now, in the order given."""
    found = dict(Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("id", "status"))
    return [found.get(job.pk, "gone") for job in jobs]


def assert_counters_match_jobs(workflow: Workflow | int) -> Workflow:
    """The workflow's counters are the counts of its jobs' statuses, and its status and
    finished_at say whether any job is still open. Returns the workflow, read again."""
    pk = workflow.pk if isinstance(workflow, Workflow) else workflow
    found = Workflow.objects.get(pk=pk)
    assert_counted(found, Job.objects.filter(workflow_id=pk).values_list("status", flat=True))
    return found


def assert_counted(workflow: Workflow, statuses: Iterable[str]) -> None:
    """``workflow``'s counters, status and finished_at, as read, agree with ``statuses``, its
    jobs' statuses as read."""
    counted = collections.Counter(statuses)
    expected = {
        "total": sum(counted.values()),
        "open": sum(n for status, n in counted.items() if status not in TERMINAL),
        "succeeded": counted["succeeded"],
        "failed": counted["failed"],
        "cancelled": counted["cancelled"],
    }
    pk = workflow.pk
    assert workflow.counts == expected, (
        f"workflow {pk}: counters {workflow.counts}, jobs {expected}"
    )
    if expected["open"]:
        assert (workflow.status, workflow.finished_at) == ("running", None), workflow
    else:
        ending = (
            "failed" if counted["failed"] else "cancelled" if counted["cancelled"] else "succeeded"
        )
        assert workflow.status == ending and workflow.finished_at is not None, workflow


def run_one_job(drain: Callable[..., Any]) -> None:
    """Run exactly one ready job (a burst worker that stops after its first claim)."""
    drain(concurrency=1, max_jobs=1)


def unmet_entry(job: Job) -> dict[str, Any]:
    """The last error entry of a job cancelled because a run condition could not be met."""
    job.refresh_from_db()
    assert job.status == "cancelled", (job.pk, job.status, job.errors)
    entry = job.errors[-1]
    assert entry["type"] == DEPENDENCY_FAILED, entry
    return entry
