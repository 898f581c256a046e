"""Leases: the reaper and the driver's renew / record fences with an injected clock, the lease
keeper's renewal schedule, and the heartbeat of a real worker (cancellation, lost leases,
graceful stop) on SQLite and PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import OperationalError
from django.utils import timezone

from django_workqueue import operations
from django_workqueue.attempt.lease import LOCKED_RETRY_SECONDS, LeaseKeeper, RunningJob
from django_workqueue.db import ClaimedJob, Outcome, OutcomeKind, driver_for
from django_workqueue.maintenance import reaper
from django_workqueue.models import Job
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from testproject.testapp.tasks import add, sleep_for, wait_for_cancel
from tests.support.database import db_now, expire_and_reap, fresh, ledger, listening, row_snapshot
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.tasks import first_attempt_results, hold_first_attempt
from tests.support.waiting import join_slots, wait_until

EXC = "django_workqueue.exceptions"
LATER = dt.timedelta(minutes=10)


def driver():
    return driver_for("default")


# --- the reaper, with the clock injected --------------------------------------------------


@pytest.mark.django_db
class TestReaper:
    def test_expired_lease_returns_the_job_to_ready_and_keeps_the_attempt(self):
        job = JobFactory(running=True, lease_owner="worker-gone")
        run_after = job.run_after
        untouched = JobFactory(running=True)
        now = job.lease_expires_at + dt.timedelta(seconds=1)
        untouched.lease_expires_at = now + dt.timedelta(seconds=30)
        untouched.save()
        untouched_before = row_snapshot(untouched.pk)

        assert reaper.run_once(now=now) == 1

        job = fresh(job)
        assert (job.status, job.attempt, job.max_attempts) == ("ready", 1, 3)
        assert (job.lease_owner, job.lease_expires_at, job.finished_at) == (None, None, None)
        # It keeps its place in the queue: a crash must not send it behind a backlog.
        assert job.run_after == run_after
        [error] = job.errors
        assert (error["attempt"], error["type"], error["traceback"]) == (1, "LeaseExpired", None)
        assert "worker-gone" in error["message"]
        assert row_snapshot(untouched.pk) == untouched_before

    def test_a_job_whose_crash_budget_is_spent_fails(self):
        job = JobFactory(running=True, attempt=3, max_attempts=3, crashes_charged=2)

        assert reaper.run_once(now=timezone.now() + LATER) == 1

        job = fresh(job)
        assert (job.status, job.attempt, job.crashes_charged) == ("failed", 3, 3)
        assert job.finished_at is not None
        assert [e["type"] for e in job.errors] == ["LeaseExpired"]
        assert list(Job.objects.dead_letters()) == [job]

    def test_a_job_with_a_cancel_request_ends_cancelled(self):
        job = JobFactory(running=True, cancel_requested_at=timezone.now())

        assert reaper.run_once(now=timezone.now() + LATER) == 1

        job = fresh(job)
        assert (job.status, job.attempt) == ("cancelled", 1)
        assert job.finished_at is not None

    def test_unexpired_leases_and_other_statuses_are_untouched(self):
        jobs = [
            JobFactory(running=True),
            JobFactory(),
            JobFactory(failed=True),
            JobFactory(status="succeeded", attempt=1),
        ]
        before = [row_snapshot(job.pk) for job in jobs]

        assert reaper.run_once(now=timezone.now()) == 0

        assert [row_snapshot(job.pk) for job in jobs] == before

    def test_two_reapers_in_a_row_reap_once(self):
        job = JobFactory(expired=True)

        assert reaper.run_once(now=timezone.now()) == 1
        assert reaper.run_once(now=timezone.now()) == 0

        job = fresh(job)
        assert (job.status, job.attempt, len(job.errors)) == ("ready", 1, 1)

    def test_without_an_injected_clock_the_database_clock_is_used(self):
        expired, alive = JobFactory(expired=True), JobFactory(running=True)

        assert reaper.run_once() == 1

        assert (fresh(expired).status, fresh(alive).status) == ("ready", "running")


@pytest.mark.postgres_only  # NOTIFY is PostgreSQL's; SQLite workers poll
@pytest.mark.django_db(transaction=True)
def test_the_reaper_announces_jobs_it_puts_back_in_ready():
    """The reaper NOTIFYs the queue of every job it puts back in ready, once per queue: with
    LISTEN/NOTIFY and a long poll interval, a reaped job would otherwise wait for some worker's
    next poll. A job it fails (its attempts spent) wakes nobody."""
    with listening() as listener:
        JobFactory(expired=True, queue="mail")
        JobFactory(expired=True, queue="mail")
        JobFactory(  # its crash budget spent: failed
            expired=True, queue="reports", attempt=3, max_attempts=3, crashes_charged=2
        )
        assert reaper.run_once() == 3
        queues = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
        queues += [n.payload for n in listener.notifies(timeout=0.5)]
    assert queues == ["mail"]  # once per queue, and not for the job that failed


# --- the driver's renew and record fences -------------------------------------------------


@pytest.mark.django_db
class TestFences:
    def test_renew_extends_only_own_leases_of_that_attempt_and_reports_cancels(self):
        past = timezone.now() - dt.timedelta(seconds=5)
        mine = JobFactory(running=True, lease_owner="w1", lease_expires_at=past)
        cancel = JobFactory(
            running=True, lease_owner="w1", lease_expires_at=past, cancel_requested_at=past
        )
        other_owner = JobFactory(running=True, lease_owner="w2", lease_expires_at=past)
        next_attempt = JobFactory(running=True, lease_owner="w1", attempt=2, lease_expires_at=past)
        not_running = JobFactory(lease_owner="w1", lease_expires_at=past, attempt=1)
        leases = [(job.pk, 1) for job in (mine, cancel, other_owner, next_attempt, not_running)]
        others = [other_owner, next_attempt, not_running]
        others_before = [row_snapshot(job.pk) for job in others]

        renewed = driver().renew("w1", leases)

        assert renewed == {mine.pk: False, cancel.pk: True}
        now = db_now()
        for job in (mine, cancel):
            expires = fresh(job).lease_expires_at
            assert abs(expires - (now + dt.timedelta(seconds=60))) < dt.timedelta(seconds=5)
        assert [row_snapshot(job.pk) for job in others] == others_before

    def test_renew_of_nothing_is_a_no_op(self):
        assert driver().renew("w1", []) == {}

    def test_a_stale_owners_record_changes_nothing(self):
        job = JobFactory()
        [first] = driver().claim(["default"], 1, "owner-a")
        later = timezone.now() + LATER  # owner-a's lease has expired by then
        assert reaper.run_once(now=later) == 1
        [second] = driver().claim(["default"], 1, "owner-b", now=later)
        assert (first.attempt, second.attempt) == (1, 2)
        before = row_snapshot(job.pk)

        def succeeded(attempt: int) -> Outcome:
            return Outcome(
                job_id=job.pk, attempt=attempt, kind=OutcomeKind.SUCCEEDED, max_attempts=3,
                result_json='"stale"',
            )  # fmt: skip

        assert driver().record("owner-a", succeeded(1)) is False
        assert driver().record("owner-a", succeeded(2)) is False  # the attempt, not the owner
        assert driver().record("owner-b", succeeded(1)) is False  # the owner, not the attempt
        assert driver().set_progress("owner-a", job.pk, 1, 5, 10, "stale") is False
        assert row_snapshot(job.pk) == before

        assert driver().record("owner-b", succeeded(2)) is True  # the owner can
        job = fresh(job)
        assert (job.status, job.result, job.attempt) == ("succeeded", "stale", 2)


STALLED = "worker-that-stalled"


def reclaimed_by_the_same_worker() -> tuple[ClaimedJob, ClaimedJob]:
    """Attempt 1 of a job, reaped while its body still ran, then claimed again as attempt 2 by
    the same worker (the runner keeps both bodies running: see ``Ledger.lease``)."""
    job = add.enqueue(1, 2)
    [first] = driver().claim(["default"], 1, STALLED)
    with expire_and_reap(job):
        pass
    [second] = driver().claim(["default"], 1, STALLED)
    assert (second.id, second.attempt) == (first.id, 2)
    return first, second


def outcome(job: ClaimedJob, kind: OutcomeKind) -> Outcome:
    failed = kind != OutcomeKind.SUCCEEDED
    return Outcome(
        job_id=job.id, attempt=job.attempt, kind=kind, max_attempts=job.max_attempts,
        result_json=None if failed else f'"attempt {job.attempt}"',
        error={"type": "ValueError", "message": "boom"} if failed else None,
    )  # fmt: skip


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("skip_locked", [True, False])
def test_a_batch_with_two_attempts_of_one_job_reports_only_the_current_one_written(skip_locked):
    """A stale attempt's late outcome and the current attempt's outcome of the same job can share
    one batch of the worker's: the fence writes only the current one, and the driver reports
    what it wrote as (job id, attempt) pairs, so the stale outcome is not reported written."""
    stale, current = reclaimed_by_the_same_worker()
    batch = [outcome(stale, OutcomeKind.SUCCEEDED), outcome(current, OutcomeKind.RETRY)]

    recorded = driver().record_many(STALLED, batch, skip_locked=skip_locked)

    assert recorded.written == {(current.id, 2)}
    assert recorded.busy == set()
    job = Job.objects.get(pk=current.id)
    assert (job.status, job.attempt, job.result) == (Status.READY, 2, None)
    assert [error["attempt"] for error in job.errors] == [1, 2]  # the reaper's, attempt 2's


@pytest.mark.django_db(transaction=True)
def test_the_worker_logs_a_stale_outcome_dropped_from_a_shared_batch(caplog):
    """The fencing promise: a stale worker's late write changes nothing and is logged, also
    when it shares a batch with the current attempt's outcome of the same job."""
    stale, current = reclaimed_by_the_same_worker()
    worker = Worker(worker_id=STALLED)
    worker.completer.hand_over(outcome(stale, OutcomeKind.SUCCEEDED))
    worker.completer.hand_over(outcome(current, OutcomeKind.SUCCEEDED))

    with caplog.at_level(logging.WARNING, logger="django_workqueue.worker"):
        worker._flush()

    dropped = [r.args for r in caplog.records if "no longer holds the lease" in r.msg]
    assert dropped == [(stale.id, 1, OutcomeKind.SUCCEEDED)]
    job = Job.objects.get(pk=current.id)
    assert (job.status, job.attempt, job.result) == (Status.SUCCEEDED, 2, "attempt 2")


@pytest.mark.django_db
def test_a_job_released_at_shutdown_keeps_its_place_in_the_queue():
    """A release spends no budget and keeps the job's run_after, as the reaper does for a
    crashed job: a deploy's SIGTERM must not send the job behind every job enqueued after it."""
    job = JobFactory(running=True, lease_owner="w1")
    run_after = job.run_after - dt.timedelta(minutes=5)
    Job.objects.filter(pk=job.pk).update(run_after=run_after)
    release = Outcome(job_id=job.pk, attempt=1, kind=OutcomeKind.RELEASE, max_attempts=3)

    assert driver().record("w1", release)

    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts) == (Status.READY, 1, 3)
    assert (job.attempts_charged, job.crashes_charged) == (0, 0)
    assert job.run_after == run_after
    assert (job.lease_owner, job.errors) == (None, [])


# --- the lease keeper's renewal schedule ---------------------------------------------------


class FailingDriver:
    """A driver whose every renewal fails as a lost connection does."""

    def renew_leases(self, owner: str, leases: Any) -> tuple[dict[int, bool], set[int]]:
        raise OperationalError("server closed the connection unexpectedly")


def running_jobs(lease_seconds: int) -> dict[int, RunningJob]:
    job = SimpleNamespace(lease_seconds=lease_seconds, attempt=1)
    context = SimpleNamespace(job=job, attempt=1, finished=False, lease_lost=False)
    return {1: RunningJob(context)}  # type: ignore[arg-type]


def test_a_renewal_that_fails_stays_due():
    """A failed renewal stays due, so the control loop retries it after its error backoff:
    moved a whole interval away, one blip and one failed retry would lose every lease of three
    intervals."""
    keeper = LeaseKeeper(FailingDriver(), "w1")  # type: ignore[arg-type]
    keeper.next_renewal = 0.0
    with pytest.raises(OperationalError):
        keeper.renew(running_jobs(lease_seconds=3))
    assert keeper.due(0.0) and keeper.next_renewal == 0.0


@pytest.mark.postgres_only  # SQLite has no row locks: its renewal waits for the write lock
@pytest.mark.django_db(transaction=True)
def test_a_renewal_that_finds_a_row_locked_is_tried_again_soon(hold_row):
    """PostgreSQL's renewal skips a row another session holds locked rather than wait: the
    lease is still this worker's, but not extended. It is tried again within
    LOCKED_RETRY_SECONDS, not a third of the lease later (two such misses would cost it)."""
    free, locked = JobFactory.create_batch(2, running=True, lease_owner="w1")
    jobs = {job.pk: RunningJob(SimpleNamespace(job=SimpleNamespace(lease_seconds=30, attempt=1),
                                               attempt=1, finished=False, lease_lost=False))
            for job in (free, locked)}  # fmt: skip
    keeper = LeaseKeeper(driver(), "w1")
    release = hold_row(locked.pk)
    try:
        keeper.renew(jobs)  # type: ignore[arg-type]
        assert keeper.next_renewal <= time.monotonic() + LOCKED_RETRY_SECONDS
        assert not any(item.context.lease_lost for item in jobs.values())
    finally:
        release.set()
    wait_until(lambda: not driver().renew_leases("w1", [(locked.pk, 1)])[1], timeout=10)
    started = time.monotonic()
    keeper.renew(jobs)  # type: ignore[arg-type]
    assert keeper.next_renewal - started >= keeper.interval(jobs)  # type: ignore[arg-type]


# --- a real worker's heartbeat ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@workqueue_settings(HEARTBEAT_INTERVAL=0.2)
def test_cancelling_a_running_job_stops_it_and_it_ends_cancelled(background_worker):
    background_worker()
    job = wait_for_cancel.enqueue()
    wait_until(lambda: ledger(job) == [(1, "started")], timeout=10)

    result = operations.cancel_job(job)

    assert result.action == "cancel_requested"
    wait_until(lambda: fresh(job).status == "cancelled", timeout=10)
    job = fresh(job)
    assert (job.attempt, job.result) == (1, None)
    assert job.finished_at is not None
    assert [e["type"] for e in job.errors] == [f"{EXC}.JobCancelled"]
    assert ledger(job) == [(1, "started")]  # not retried


@pytest.mark.django_db(transaction=True)
@workqueue_settings(HEARTBEAT_INTERVAL=0.2)
def test_heartbeats_do_not_cancel_a_job_nobody_cancelled(background_worker):
    # The control for the cancel test above: several renewals pass while the job runs.
    background_worker()
    job = wait_for_cancel.enqueue(limit=1.0)

    wait_until(lambda: fresh(job).is_finished, timeout=10)

    job = fresh(job)
    assert (job.status, job.result, job.errors) == (
        "succeeded",
        "finished without cancellation",
        [],
    )


@pytest.mark.django_db(transaction=True)
@workqueue_settings(HEARTBEAT_INTERVAL=0.2)
def test_a_reaped_job_is_cancelled_on_its_worker_and_runs_again(background_worker):
    background_worker(concurrency=2)
    job = hold_first_attempt.enqueue()
    wait_until(lambda: ledger(job) == [(1, "start")], timeout=10)

    with expire_and_reap(job):
        pass

    # The worker's heartbeat finds the lease gone and cancels attempt 1, whose late success
    # is fenced out; the reaped job is claimed again and attempt 2 succeeds.
    wait_until(lambda: fresh(job).status == "succeeded", timeout=15)
    wait_until(lambda: (1, "late") in ledger(job), timeout=15)
    assert first_attempt_results.pop(job.pk) == {"cancelled": True, "lease_lost": True}
    job = fresh(job)
    assert (job.result, job.attempt) == ("attempt 2", 2)
    assert [(e["attempt"], e["type"]) for e in job.errors] == [(1, "LeaseExpired")]
    assert sorted(ledger(job)) == [(1, "late"), (1, "start"), (2, "start")]


@pytest.mark.django_db(transaction=True)
def test_stop_past_the_grace_period_releases_the_job_without_charging_it(background_worker):
    worker = background_worker(grace_seconds=0.05)
    job = sleep_for.enqueue(1.5)
    wait_until(lambda: ledger(job) == [(1, "started")], timeout=10)

    worker.stop()

    wait_until(lambda: fresh(job).status == "ready", timeout=10)
    job = fresh(job)
    # The claim counts, the budgets do not.
    assert (job.attempt, job.max_attempts) == (1, 3)
    assert (job.attempts_charged, job.crashes_charged) == (0, 0)
    assert (job.lease_owner, job.lease_expires_at, job.finished_at) == (None, None, None)
    assert job.errors == []
    # The body still finishes on its slot; its late success must not be written.
    join_slots(worker)
    assert ledger(job) == [(1, "started"), (1, "finished")]
    job = fresh(job)
    assert (job.status, job.result) == ("ready", None)


@pytest.mark.django_db(transaction=True)
def test_stop_within_a_long_grace_period_lets_the_job_finish(background_worker):
    worker = background_worker(grace_seconds=30)
    job = sleep_for.enqueue(0.5)
    wait_until(lambda: ledger(job) == [(1, "started")], timeout=10)

    worker.stop()

    wait_until(lambda: fresh(job).is_finished, timeout=15)
    job = fresh(job)
    assert (job.status, job.result, job.attempt, job.max_attempts) == ("succeeded", 0.5, 1, 3)
    assert ledger(job) == [(1, "started"), (1, "finished")]
