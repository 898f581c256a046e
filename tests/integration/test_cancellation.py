"""Cooperative cancellation with a typed reason: what a running job is told, and how soon.

On PostgreSQL ``cancel_job`` reaches the running job's worker through NOTIFY (no heartbeat
needed); elsewhere, and as the fallback, the heartbeat finds the request. A worker whose job was
deleted, finished elsewhere or taken by another worker tells its body which it was.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest

from django_workqueue import operations, task
from django_workqueue.context import AbortReason
from django_workqueue.exceptions import JobCancelled
from django_workqueue.models import Job
from tests.support.database import fresh
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: What each body saw: the abort reason on its context and on the JobCancelled it raised.
seen: dict[int, dict[str, Any]] = {}


@task(max_attempts=1, lease_seconds=60)
def waits_to_be_stopped(context: Any) -> str:
    started = time.monotonic()
    seen[context.job_id] = {"running": True}
    if not context.cancelled.wait(30):
        return "never stopped"
    seen[context.job_id].update(reason=context.abort_reason, after=time.monotonic() - started)
    try:
        context.raise_if_cancelled()
    except JobCancelled as exc:
        seen[context.job_id]["raised"] = exc.reason
        raise
    return "unreachable"


@task(max_attempts=1, timeout=0.3)
def runs_past_its_timeout(context: Any) -> None:
    context.cancelled.wait(30)
    seen[context.job_id] = {"reason": context.abort_reason}
    context.raise_if_cancelled()


def _start(background_worker: Any) -> Job:
    job = waits_to_be_stopped.enqueue()
    background_worker(concurrency=1)
    wait_until(lambda: seen.get(job.pk), timeout=20, message="the body to start")
    return job


@pytest.mark.postgres_only  # NOTIFY
def test_cancel_reaches_a_running_job_at_once_without_waiting_for_a_heartbeat(
    background_worker: Any,
) -> None:
    # Leases of 60 s renew every 20 s, heartbeats every 30 s: only the NOTIFY can be in time.
    with workqueue_settings(HEARTBEAT_INTERVAL=30.0):
        job = _start(background_worker)
        operations.cancel_job(job)
        wait_until(lambda: "reason" in seen[job.pk], timeout=5, message="the cancellation")
    assert seen[job.pk]["reason"] == AbortReason.CANCEL_REQUESTED
    assert seen[job.pk]["raised"] == AbortReason.CANCEL_REQUESTED
    wait_until(lambda: fresh(job).status == "cancelled", timeout=10)


@pytest.mark.postgres_only  # NOTIFY
def test_a_cancel_inside_a_transaction_arrives_when_it_commits(background_worker: Any) -> None:
    from django.db import transaction

    with workqueue_settings(HEARTBEAT_INTERVAL=30.0):
        job = _start(background_worker)
        with transaction.atomic():
            operations.cancel_job(job)
            time.sleep(0.3)  # the worker must not hear of it before the commit
            assert "reason" not in seen[job.pk]
        wait_until(lambda: "reason" in seen[job.pk], timeout=5, message="the cancellation")


def test_without_notify_the_heartbeat_delivers_the_cancellation(background_worker: Any) -> None:
    with workqueue_settings(LISTEN_NOTIFY=False, HEARTBEAT_INTERVAL=0.2):
        job = _start(background_worker)
        operations.cancel_job(job)
        wait_until(lambda: "reason" in seen[job.pk], timeout=10, message="the cancellation")
    assert seen[job.pk]["reason"] == AbortReason.CANCEL_REQUESTED
    assert seen[job.pk]["raised"] == AbortReason.CANCEL_REQUESTED  # JobCancelled.reason too
    wait_until(lambda: fresh(job).status == "cancelled", timeout=10)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda job: Job.objects.filter(pk=job.pk).delete(), AbortReason.DELETED),
        (
            lambda job: Job.objects.filter(pk=job.pk).update(status="succeeded", lease_owner=None),
            AbortReason.COMPLETED_ELSEWHERE,
        ),
        (
            lambda job: Job.objects.filter(pk=job.pk).update(
                status="running", lease_owner="another-worker", attempt=2
            ),
            AbortReason.LEASE_LOST,
        ),
    ],
    ids=["deleted", "completed-elsewhere", "lease-lost"],
)
def test_a_job_no_longer_this_workers_is_stopped_with_the_reason(
    background_worker: Any, change: Any, reason: AbortReason
) -> None:
    with workqueue_settings(HEARTBEAT_INTERVAL=0.2):
        job = _start(background_worker)
        change(job)
        wait_until(lambda: "raised" in seen[job.pk], timeout=10, message="the abort")
    assert (seen[job.pk]["reason"], seen[job.pk]["raised"]) == (reason, reason)


def test_a_timeout_is_its_own_reason(drain: Any) -> None:
    job = runs_past_its_timeout.enqueue()
    drain(concurrency=1)
    assert seen[job.pk]["reason"] == AbortReason.TIMEOUT
    job = fresh(job)
    assert job.status == "failed" and job.errors[0]["type"].endswith("JobTimeout")


def test_cancelling_a_scheduled_job_means_it_never_runs(drain: Any) -> None:
    job = waits_to_be_stopped.using(delay=dt.timedelta(hours=1)).enqueue()
    assert fresh(job).status == "scheduled"
    assert operations.cancel_job(job).action == "cancelled"
    Job.objects.filter(pk=job.pk).update(run_after="2000-01-01T00:00:00Z")
    drain()
    assert fresh(job).status == "cancelled" and job.pk not in seen
