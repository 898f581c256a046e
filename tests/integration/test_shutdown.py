"""Graceful shutdown: past the grace period jobs go back to ready, and a body that returns just
as its job is released still has its outcome written (the job does not run again)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from django_workqueue import task
from django_workqueue.context import AbortReason
from django_workqueue.db import OutcomeKind
from django_workqueue.worker.runner import Worker
from testproject.testapp.models import LedgerEntry
from tests.support.database import fresh
from tests.support.waiting import join_slots, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: Per job id: the body waits on it, and records the abort reason it saw when it was set.
holds: dict[int, threading.Event] = {}
seen_reasons: dict[int, str | None] = {}


@task(max_attempts=3)
def held_until_released(context: Any) -> str:
    LedgerEntry.objects.create(job_id=context.job_id, attempt=context.attempt, pid=0, note="ran")
    hold = holds.get(context.job_id)
    if hold is not None:
        hold.wait(20)
    seen_reasons[context.job_id] = context.abort_reason
    return "done"


def test_a_body_that_returns_while_its_release_is_written_is_recorded_not_run_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = held_until_released.enqueue()
    holds[job.pk] = threading.Event()
    worker = Worker(concurrency=1, poll_interval=0.05, grace_seconds=0.1)
    record_many = worker.driver.record_many

    def release_as_the_body_returns(owner: str, outcomes: Any, **kwargs: Any) -> Any:
        if any(o.kind == OutcomeKind.RELEASE for o in outcomes):
            # The worker decided to release the job; now its body returns and hands over its
            # success, before the release reaches the database.
            holds[job.pk].set()
            wait_until(lambda: worker.completer.pending, timeout=10, message="the hand-over")
        return record_many(owner, outcomes, **kwargs)

    monkeypatch.setattr(worker.driver, "record_many", release_as_the_body_returns)
    thread = threading.Thread(target=worker.run)
    thread.start()
    wait_until(lambda: fresh(job).status == "running", timeout=20)
    worker.stop()
    thread.join(30)
    join_slots(worker)

    job = fresh(job)
    assert (job.status, job.result, job.attempt) == ("succeeded", "done", 1)
    assert job.max_attempts == 3  # the release's uncharged attempt was taken back
    assert LedgerEntry.objects.filter(job_id=job.pk).count() == 1
    assert seen_reasons[job.pk] == AbortReason.SHUTDOWN


def test_a_body_still_running_past_the_grace_period_is_released_and_told_why() -> None:
    job = held_until_released.enqueue()
    holds[job.pk] = threading.Event()
    worker = Worker(concurrency=1, poll_interval=0.05, grace_seconds=0.1)
    thread = threading.Thread(target=worker.run)
    thread.start()
    wait_until(lambda: fresh(job).status == "running", timeout=20)
    worker.stop()
    thread.join(30)
    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts, job.attempts_charged) == ("ready", 1, 3, 0)
    holds[job.pk].set()
    join_slots(worker)
    assert seen_reasons[job.pk] == AbortReason.SHUTDOWN
    assert fresh(job).status == "ready"  # its late success was fenced out: it runs again


@task(max_attempts=1)
def stops_when_told(context: Any) -> str:
    seen_reasons[context.job_id] = None
    context.cancelled.wait(20)
    seen_reasons[context.job_id] = context.abort_reason
    context.raise_if_cancelled()
    return "not told"


def test_a_body_that_obeys_the_shutdown_abort_is_released_uncharged_not_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = stops_when_told.enqueue()
    worker = Worker(concurrency=1, poll_interval=0.05, grace_seconds=0.1)
    record_many = worker.driver.record_many
    released: list[bool] = []

    def release_after_the_body_stopped(owner: str, outcomes: Any, **kwargs: Any) -> Any:
        if not released and any(o.kind == OutcomeKind.RELEASE for o in outcomes):
            # The body heard the abort and raised JobCancelled before the release is written.
            released.append(True)
            wait_until(lambda: worker.completer.pending, timeout=10, message="the hand-over")
        return record_many(owner, outcomes, **kwargs)

    monkeypatch.setattr(worker.driver, "record_many", release_after_the_body_stopped)
    thread = threading.Thread(target=worker.run)
    thread.start()
    wait_until(lambda: job.pk in seen_reasons, timeout=20, message="the body to start")
    worker.stop()
    thread.join(30)
    join_slots(worker)

    assert seen_reasons[job.pk] == AbortReason.SHUTDOWN
    job = fresh(job)
    # Stopping because the worker said so is not a failure: the job goes back, uncharged.
    assert (job.status, job.attempt, job.max_attempts, job.errors) == ("ready", 1, 1, [])
    assert (job.attempts_charged, job.crashes_charged) == (0, 0)


def test_a_release_that_ends_a_cancel_requested_step_releases_its_workflow_and_signals():
    # A release outcome turns into "cancelled" when a cancellation was requested: the job ends
    # there, so its dependents, its workflow and the signals must learn of it in that commit.
    from django.utils import timezone

    from django_workqueue import chain, signals
    from django_workqueue.attempt.lease import RunningJob
    from django_workqueue.context import JobContext
    from django_workqueue.models import Job
    from testproject.testapp.tasks import add

    cancelled: list[int] = []

    def receive(sender: Any, **kwargs: Any) -> None:
        cancelled.append(kwargs["job_id"])

    signals.job_cancelled.connect(receive)
    try:
        workflow = chain(add.s(1, 2), add.s(3)).enqueue()
        first, second = Job.objects.filter(workflow=workflow).order_by("id")
        worker = Worker(concurrency=1)
        claimed = worker.driver.claim_job(first.pk, worker.id)
        assert claimed is not None
        Job.objects.filter(pk=first.pk).update(cancel_requested_at=timezone.now())
        context = JobContext(claimed, owner=worker.id, driver=worker.driver)
        worker._running[first.pk] = RunningJob(context)

        worker.shutdown_sequence().release_remaining()
    finally:
        signals.job_cancelled.disconnect(receive)

    assert [fresh(job).status for job in (first, second)] == ["cancelled", "cancelled"]
    workflow.refresh_from_db()
    assert (workflow.status, workflow.open) == ("cancelled", 0)
    assert cancelled == [first.pk, second.pk]
