"""Operations on jobs: cancel, redrive and retry, as the admin, API and CLI call them."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from django_workqueue import operations
from django_workqueue.budgets import describe_job
from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.models import LedgerEntry
from testproject.testapp.tasks import add, record
from tests.support.database import row_snapshot as snapshot
from tests.support.factories import JobFactory

pytestmark = pytest.mark.django_db

ADD = "testproject.testapp.tasks.add"
FLAKY = "testproject.testapp.tasks.flaky"  # max_attempts=4
SEND_MAIL = "testproject.testapp.tasks.send_mail"  # the default max_attempts, 3


def is_due(job: Job) -> bool:
    return Job.objects.filter(pk=job.pk, run_after__lte=Now()).exists()


# --- cancel -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [Status.READY, Status.BLOCKED])
def test_cancel_a_waiting_job_cancels_it(status):
    job = JobFactory(status=status)
    result = operations.cancel_job(job)
    assert (result.action, result.count, bool(result)) == ("cancelled", 1, True)
    assert result.message == f"job {job.pk} cancelled"
    job.refresh_from_db()
    assert job.status == Status.CANCELLED
    assert job.finished_at is not None
    assert job.cancel_requested_at is not None


def test_cancel_accepts_a_job_id():
    job = JobFactory()
    assert operations.cancel_job(job.pk).action == "cancelled"
    assert Job.objects.get(pk=job.pk).status == Status.CANCELLED


def test_cancel_a_running_job_asks_its_worker_to_stop():
    job = JobFactory(running=True)
    result = operations.cancel_job(job)
    assert (result.action, result.count) == ("cancel_requested", 1)
    assert "its worker has been asked to stop it" in result.message
    job.refresh_from_db()
    assert job.status == Status.RUNNING  # the worker ends it; the lease is still its own
    assert job.cancel_requested_at is not None
    assert (job.lease_owner, job.finished_at) == ("worker-a", None)


def test_cancel_a_running_job_twice_keeps_the_first_request():
    job = JobFactory(running=True)
    operations.cancel_job(job)
    first_request = Job.objects.get(pk=job.pk).cancel_requested_at
    result = operations.cancel_job(job)
    assert (result.action, result.count, bool(result)) == ("unchanged", 0, False)
    assert result.message == f"job {job.pk}: cancellation already requested"
    assert Job.objects.get(pk=job.pk).cancel_requested_at == first_request


@pytest.mark.parametrize("status", [Status.SUCCEEDED, Status.FAILED, Status.CANCELLED])
def test_cancel_a_finished_job_changes_nothing(status):
    job = JobFactory(status=status, finished_at=timezone.now(), attempt=1)
    before = snapshot(job)
    result = operations.cancel_job(job)
    assert (result.action, result.count) == ("unchanged", 0)
    assert result.message == f"job {job.pk} already finished ({status})"
    assert snapshot(job) == before


def test_cancel_a_missing_job_raises_does_not_exist():
    job = JobFactory()
    missing = job.pk + 1000
    with pytest.raises(Job.DoesNotExist, match=f"there is no job {missing}"):
        operations.cancel_job(missing)


def test_cancel_touches_only_its_job():
    job, other = JobFactory(), JobFactory()
    before = snapshot(other)
    operations.cancel_job(job)
    assert snapshot(other) == before


@pytest.mark.django_db(transaction=True)
def test_a_cancelled_job_never_runs(drain):
    cancelled = record.enqueue(note="cancelled")
    kept = record.enqueue(note="kept")
    operations.cancel_job(cancelled)
    drain()
    cancelled.refresh_from_db()
    kept.refresh_from_db()
    assert (cancelled.status, cancelled.attempt, cancelled.result) == (Status.CANCELLED, 0, None)
    assert (kept.status, kept.result) == (Status.SUCCEEDED, 1)
    assert list(LedgerEntry.objects.values_list("job_id", "note")) == [(kept.pk, "kept")]


# --- redrive ------------------------------------------------------------------------------------


def test_redrive_by_ids_moves_failed_jobs_back_to_ready():
    first, second, untouched = JobFactory.create_batch(3, failed=True)
    result = operations.redrive([first.pk, second])  # ids and jobs both work
    assert (result.action, result.count, bool(result)) == ("redriven", 2, True)
    assert result.message == "2 failed job(s) moved back to ready"
    for job in (first, second):
        job.refresh_from_db()
        assert job.status == Status.READY
        # The claims keep counting; a fresh budget, max_attempts kept as it is.
        assert (job.attempt, job.max_attempts) == (3, 3)
        assert (job.attempts_charged, job.crashes_charged, job.redriven_attempts) == (0, 0, 3)
        assert job.finished_at is None
        assert (job.lease_owner, job.lease_expires_at, job.cancel_requested_at) == (
            None, None, None,
        )  # fmt: skip
        assert [e["attempt"] for e in job.errors] == [1, 2, 3]  # history kept
        assert is_due(job)
    untouched.refresh_from_db()
    assert untouched.status == Status.FAILED


def test_redrive_with_an_explicit_budget():
    job = JobFactory(failed=True, attempt=5, max_attempts=5, attempts_charged=5)
    assert operations.redrive([job], attempts=2).count == 1
    job.refresh_from_db()
    assert (job.status, job.attempt, job.max_attempts) == (Status.READY, 5, 2)
    assert (job.attempts_charged, job.redriven_attempts) == (0, 5)


def test_redrive_keeps_each_jobs_own_budget():
    """max_attempts is never rewritten: each job keeps the budget it was enqueued with, the
    spent one and the crash budget start afresh, and the attempts spent so far are kept for
    display ("attempt 1 of 4 (4 before the redrive)")."""
    flaky = JobFactory(failed=True, task_name=FLAKY, attempt=4, max_attempts=4, attempts_charged=4)
    mail = JobFactory(
        failed=True, task_name=SEND_MAIL, attempt=5, max_attempts=3, crashes_charged=3,
        attempts_charged=2,
    )  # fmt: skip
    gone = JobFactory(failed=True, task_name="removed.tasks.old", attempt=2, max_attempts=2)
    assert operations.redrive([flaky, mail, gone]).count == 3
    rows = Job.objects.values_list(
        "task_name", "max_attempts", "attempts_charged", "crashes_charged", "redriven_attempts"
    )
    assert {name: rest for name, *rest in rows} == {
        FLAKY: [4, 0, 0, 4], SEND_MAIL: [3, 0, 0, 2], "removed.tasks.old": [2, 0, 0, 3],
    }  # fmt: skip
    assert operations.redrive([flaky]).count == 0  # not failed: nothing to redrive


def test_two_redrives_never_grow_the_budget():
    """A task of 2 attempts redriven twice reads "attempt 1 of 2 (4 before the redrive)", not
    the 4/6 that raising max_attempts showed."""
    job = JobFactory(failed=True, attempt=2, max_attempts=2, attempts_charged=2)
    operations.redrive([job])
    Job.objects.filter(pk=job.pk).update(status=Status.FAILED, attempt=4, attempts_charged=2)
    operations.redrive([job])
    job.refresh_from_db()
    assert (job.attempt, job.max_attempts, job.attempts_charged, job.redriven_attempts) == (
        4, 2, 0, 4,
    )  # fmt: skip
    assert describe_job(job) == "attempt 1 of 2 (4 before the redrive)"


def test_redrive_by_queryset_filter():
    mail = JobFactory.create_batch(2, failed=True, queue="mail")
    default = JobFactory(failed=True, queue="default")
    mail_done = JobFactory(queue="mail", status=Status.SUCCEEDED, finished_at=timezone.now())
    result = operations.redrive(Job.objects.filter(queue="mail"))
    assert result.count == 2
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {
        mail[0].pk: Status.READY,
        mail[1].pk: Status.READY,
        default.pk: Status.FAILED,
        mail_done.pk: Status.SUCCEEDED,
    }


def test_redrive_all_moves_every_failed_job_and_nothing_else():
    failed = JobFactory.create_batch(3, failed=True)
    others = [
        JobFactory(),
        JobFactory(status=Status.BLOCKED),
        JobFactory(running=True),
        JobFactory(status=Status.SUCCEEDED, attempt=1, finished_at=timezone.now()),
        JobFactory(status=Status.CANCELLED, finished_at=timezone.now()),
    ]
    before = {job.pk: snapshot(job) for job in others}
    result = operations.redrive()
    assert result.count == 3
    assert set(Job.objects.filter(status=Status.READY).values_list("pk", flat=True)) == {
        *(job.pk for job in failed),
        others[0].pk,
    }
    assert {job.pk: snapshot(job) for job in others} == before


def test_redrive_with_nothing_to_do_reports_unchanged():
    done = JobFactory(status=Status.SUCCEEDED, attempt=1, finished_at=timezone.now())
    before = snapshot(done)
    result = operations.redrive([done])
    assert (result.action, result.count, bool(result)) == ("unchanged", 0, False)
    assert result.message == "0 failed job(s) moved back to ready"
    assert snapshot(done) == before
    assert operations.redrive().count == 0


@pytest.mark.parametrize("attempts", [0, -1, True, 1_000_001, 2**40, 2.5, "3"])
def test_redrive_refuses_a_bad_budget(attempts):
    job = JobFactory(failed=True)
    with pytest.raises(ValueError, match="attempts must be a positive integer"):
        operations.redrive([job], attempts=attempts)
    assert Job.objects.get(pk=job.pk).status == Status.FAILED


@pytest.mark.django_db(transaction=True)
def test_a_redriven_job_runs_and_succeeds(drain):
    job = JobFactory(failed=True, task_name=ADD, args=[2, 3])
    operations.redrive([job])
    drain()
    job.refresh_from_db()
    assert (job.status, job.result) == (Status.SUCCEEDED, 5)
    assert job.attempt == 4  # the attempt number keeps counting up
    assert len(job.errors) == 3
    assert job.finished_at is not None


# --- retry_job ----------------------------------------------------------------------------------


def test_retry_a_failed_job_redrives_it():
    job = JobFactory(failed=True)
    result = operations.retry_job(job)
    assert (result.action, result.count) == ("retried", 1)
    assert result.message == f"job {job.pk} redriven"
    job.refresh_from_db()
    assert (job.status, job.max_attempts, job.finished_at) == (Status.READY, 3, None)
    assert (job.attempts_charged, job.redriven_attempts) == (0, 3)
    assert len(job.errors) == 3


def test_retry_a_scheduled_job_makes_it_due_now():
    job = add.using(delay=3600).enqueue(1, 2)
    assert not is_due(job)
    result = operations.retry_job(job.pk)
    assert (result.action, result.count) == ("retried", 1)
    assert result.message == f"job {job.pk} is due now"
    assert is_due(job)
    assert Job.objects.get(pk=job.pk).status == Status.READY


def test_retry_a_ready_job_that_is_already_due_changes_nothing():
    job = JobFactory(run_after=timezone.now() - dt.timedelta(minutes=1))
    before = snapshot(job)
    result = operations.retry_job(job)
    assert (result.action, result.count) == ("unchanged", 0)
    assert result.message == f"job {job.pk} is ready; nothing to retry"
    assert snapshot(job) == before


@pytest.mark.parametrize(
    "traits",
    [
        {"status": Status.SUCCEEDED, "attempt": 1},
        {"status": Status.CANCELLED},
        {"running": True},
        {"status": Status.BLOCKED},
    ],
)
def test_retry_leaves_other_statuses_alone(traits):
    job = JobFactory(**traits)
    before = snapshot(job)
    result = operations.retry_job(job)
    assert (result.action, result.count, bool(result)) == ("unchanged", 0, False)
    assert result.message == f"job {job.pk} is {job.status}; nothing to retry"
    assert snapshot(job) == before


def test_retry_a_missing_job_raises_does_not_exist():
    job = JobFactory()
    with pytest.raises(Job.DoesNotExist):
        operations.retry_job(job.pk + 1000)


@pytest.mark.django_db(transaction=True)
def test_a_retried_scheduled_job_runs_when_drained(drain):
    job = add.using(delay=3600).enqueue(20, 22)
    drain()
    assert Job.objects.get(pk=job.pk).status == Status.SCHEDULED  # not due: the drain left it
    operations.retry_job(job)
    drain()
    job.refresh_from_db()
    assert (job.status, job.result, job.attempt) == (Status.SUCCEEDED, 42, 1)


@pytest.mark.django_db(transaction=True)
def test_redrive_clears_a_passed_deadline_so_the_job_really_runs(drain):
    job = add.using(deadline=dt.timedelta(seconds=60)).enqueue(1, 2)
    Job.objects.filter(pk=job.pk).update(deadline=timezone.now() - dt.timedelta(seconds=1))
    drain()
    job.refresh_from_db()
    assert (job.status, job.errors[0]["type"]) == (
        "failed",
        "django_workqueue.exceptions.DeadlineExceeded",
    )

    assert operations.redrive([job]).action == "redriven"
    drain()

    job.refresh_from_db()
    assert (job.status, job.result, job.deadline) == ("succeeded", 3, None)


@pytest.mark.django_db(transaction=True)
def test_redrive_keeps_a_deadline_still_ahead():
    ahead = timezone.now() + dt.timedelta(hours=1)
    job = JobFactory(failed=True, deadline=ahead)
    operations.redrive([job])
    job.refresh_from_db()
    assert (job.status, job.deadline) == ("ready", ahead)


@pytest.mark.django_db(transaction=True)
def test_retry_of_a_scheduled_job_past_its_deadline_clears_it_and_makes_it_due():
    job = JobFactory(
        status="scheduled", run_after=timezone.now() + dt.timedelta(hours=1),
        deadline=timezone.now() - dt.timedelta(seconds=1),
    )  # fmt: skip
    assert operations.retry_job(job).action == "retried"
    job.refresh_from_db()
    assert (job.status, job.deadline) == ("ready", None)
