"""Pausing and resuming queues, holding and releasing jobs (operations.queues, .holds)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from django_workqueue import chain, operations, wakeup
from django_workqueue.db import driver_for
from django_workqueue.exceptions import UnknownQueue
from django_workqueue.maintenance import promoter
from django_workqueue.models import Job, Queue
from django_workqueue.states import Status
from testproject.testapp.tasks import add, echo, fail_step, send_mail, wait_for_cancel
from tests.support.database import fresh
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until
from tests.support.workflows import assert_counters_match_jobs, statuses, unmet_entry

pytestmark = pytest.mark.django_db(transaction=True)


def claim(*queues: str) -> list[int]:
    return [job.id for job in driver_for("default").claim(list(queues), 10, "worker-a")]


# --- pause and resume ---------------------------------------------------------------------------


def test_a_paused_queue_gets_no_claims_while_another_queue_drains(background_worker):
    operations.pause_queue("mail")
    mails = [send_mail.enqueue(f"user{n}@example.com") for n in range(5)]  # enqueue still works
    sums = [add.enqueue(n, n) for n in range(5)]
    worker = background_worker(queues=["default", "mail"])

    # send_mail has the higher priority: unpaused, its jobs would be claimed first.
    wait_until(lambda: statuses(*sums) == ["succeeded"] * 5, message="the default queue to drain")
    assert statuses(*mails) == ["ready"] * 5
    assert all(fresh(job).attempt == 0 for job in mails)
    assert worker.claimed_count == 5

    operations.resume_queue("mail")
    wait_until(lambda: statuses(*mails) == ["succeeded"] * 5, message="the mail queue to drain")


def test_claims_leave_out_paused_queues_until_they_are_resumed():
    mail = send_mail.enqueue("a@example.com")
    job = add.enqueue(1, 2)
    operations.pause_queue("mail")
    assert claim("mail") == []  # a claim of one queue
    assert claim("default", "mail") == [job.pk]  # and of several
    operations.resume_queue("mail")
    assert claim("default", "mail") == [mail.pk]


def test_a_running_job_of_a_paused_queue_finishes(background_worker):
    running = wait_for_cancel.enqueue(limit=1.0)  # runs a second, then succeeds
    background_worker(queues=["default"])
    wait_until(lambda: fresh(running).status == "running", message="the job to start")
    operations.pause_queue("default")
    waiting = add.enqueue(1, 1)
    wait_until(lambda: fresh(running).status == "succeeded", message="the running job to end")
    assert fresh(running).result == "finished without cancellation"
    assert fresh(waiting).status == "ready"


@pytest.mark.postgres_only
@workqueue_settings(HEARTBEAT_INTERVAL=60, PROMOTE_INTERVAL=60, REAPER_INTERVAL=60)
def test_pause_and_resume_reach_an_idle_worker_at_once_on_postgresql(
    background_worker, monkeypatch
):
    """The worker polls every 30 s, runs its maintenance every minute, and the in-process
    wake-up is off: what it does within a few seconds it learnt through NOTIFY (the
    enqueue's, then the resume's)."""
    monkeypatch.setattr(wakeup, "wake", lambda queues: None)
    worker = background_worker(queues=["default", "mail"], poll_interval=30.0, concurrency=1)
    wait_until(lambda: worker._listener.connected.is_set(), message="the listener to connect")
    operations.pause_queue("mail")
    mail, job = send_mail.enqueue("a@example.com"), add.enqueue(1, 2)
    wait_until(lambda: fresh(job).status == "succeeded", timeout=8, message="the add job to run")
    assert fresh(mail).status == "ready"
    operations.resume_queue("mail")
    wait_until(
        lambda: fresh(mail).status == "succeeded", timeout=8, message="the resume to wake it"
    )


def test_pausing_a_paused_queue_and_resuming_a_running_one_change_nothing():
    first = operations.pause_queue("mail")
    assert (first.action, first.count, first.message) == ("paused", 1, "queue mail paused")
    paused_at = Queue.objects.get(name="mail").paused_at
    again = operations.pause_queue("mail")
    assert (again.action, again.count) == ("unchanged", 0)
    assert Queue.objects.get(name="mail").paused_at == paused_at
    assert operations.resume_queue("mail").action == "resumed"
    assert not Queue.objects.get(name="mail").paused
    unchanged = operations.resume_queue("mail")
    assert (unchanged.action, unchanged.message) == ("unchanged", "queue mail is not paused")
    assert operations.resume_queue("reports").action == "unchanged"  # never paused: no row
    assert not Queue.objects.filter(name="reports").exists()


@pytest.mark.parametrize("operation", [operations.pause_queue, operations.resume_queue])
def test_pausing_or_resuming_an_unknown_queue_names_the_setting(operation):
    with pytest.raises(UnknownQueue, match=r"'emails' is not one of WORKQUEUE\['QUEUES'\]"):
        operation("emails")
    assert not Queue.objects.exists()


# --- hold and release ---------------------------------------------------------------------------


def in_status(status: str) -> Job:
    """A job in ``status``: blocked (on a job due in an hour), scheduled or ready."""
    if status == "blocked":
        job = echo.using(depends_on=[echo.using(delay=3600).enqueue()]).enqueue("own")
    else:
        job = echo.using(delay=3600 if status == "scheduled" else 0).enqueue("own")
    assert job.status == status
    return job


@pytest.mark.parametrize("status", ["blocked", "scheduled", "ready"])
def test_hold_then_release_puts_a_waiting_job_back_where_it_was(status):
    job = in_status(status)
    held = operations.hold_job(job)
    assert (held.action, held.count, held.message) == ("held", 1, f"job {job.pk} held")
    assert fresh(job).status == Status.HELD
    released = operations.release_job(job.pk)
    assert (released.action, released.count) == ("released", 1)
    assert released.message == f"job {job.pk} released ({status})"
    assert fresh(job).status == status


def test_a_held_job_is_never_claimed_until_released(drain):
    job = add.enqueue(2, 3)
    operations.hold_job(job)
    assert claim("default") == []
    drain()
    assert (fresh(job).status, fresh(job).attempt) == (Status.HELD, 0)
    operations.release_job(job)
    drain()
    assert (fresh(job).status, fresh(job).result) == (Status.SUCCEEDED, 5)


def test_the_promoter_leaves_a_held_job_alone_and_release_makes_a_due_one_ready():
    job = echo.using(delay=3600).enqueue()
    operations.hold_job(job)
    Job.objects.filter(pk=job.pk).update(run_after=timezone.now() - timezone.timedelta(seconds=1))
    assert promoter.run_once() == 0
    assert fresh(job).status == Status.HELD
    assert "released (ready)" in operations.release_job(job).message


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("running", "is running; only a job that has not started can be held"),
        ("succeeded", "already finished (succeeded)"),
        ("held", "is already held"),
    ],
)
def test_hold_leaves_a_running_finished_or_held_job_unchanged(status, message):
    job = JobFactory(running=True) if status == "running" else JobFactory(status=status)
    result = operations.hold_job(job)
    assert (result.action, result.count) == ("unchanged", 0)
    assert result.message == f"job {job.pk} {message}"
    assert fresh(job).status == status


def test_release_of_a_job_that_is_not_held_changes_nothing():
    job = add.enqueue(1, 1)
    result = operations.release_job(job)
    assert (result.action, result.message) == ("unchanged", f"job {job.pk} is not held")
    assert fresh(job).status == Status.READY
    with pytest.raises(Job.DoesNotExist):
        operations.release_job(job.pk + 1000)


def test_a_held_step_keeps_its_dependents_waiting(drain):
    first, second = chain(echo.s(1), echo.s()).enqueue().jobs.order_by("id")
    operations.hold_job(first)
    drain()
    assert statuses(first, second) == ["held", "blocked"]
    assert assert_counters_match_jobs(first.workflow_id).open == 2
    operations.release_job(first)
    drain()
    assert statuses(first, second) == ["succeeded", "succeeded"]
    assert_counters_match_jobs(first.workflow_id)


def test_a_held_dependent_whose_prerequisite_succeeded_is_ready_once_released(drain):
    first, second = chain(echo.s(1), echo.s()).enqueue().jobs.order_by("id")
    operations.hold_job(second)
    drain()
    assert statuses(first, second) == ["succeeded", "held"]
    assert "released (ready)" in operations.release_job(second).message
    drain()
    assert (fresh(second).status, fresh(second).result) == ("succeeded", 1)
    assert_counters_match_jobs(first.workflow_id)


def test_a_held_dependent_whose_prerequisite_failed_ends_cancelled_once_released(drain):
    first, second = chain(fail_step.s(), echo.s()).enqueue().jobs.order_by("id")
    operations.hold_job(second)
    drain()
    assert statuses(first, second) == ["failed", "held"]
    assert "released (cancelled)" in operations.release_job(second).message
    assert unmet_entry(second)["prerequisite"] == first.pk
    assert assert_counters_match_jobs(first.workflow_id).status == "failed"


def test_a_held_dependent_released_waits_for_its_open_prerequisites_again(drain):
    done, later = echo.enqueue("now"), echo.using(delay=3600).enqueue("later")
    dependent = echo.using(depends_on=[done, later]).enqueue()
    operations.hold_job(dependent)
    drain()
    assert fresh(done).status == "succeeded"
    assert "released (blocked)" in operations.release_job(dependent).message
    row = fresh(dependent)
    assert (row.status, row.waiting_on, row.prerequisites_succeeded) == ("blocked", 1, 1)
    operations.retry_job(later)  # due now: the dependent is released when it ends
    drain()
    assert statuses(later, dependent) == ["succeeded", "succeeded"]


@pytest.mark.parametrize("ending", ["succeeded", "failed"])
def test_a_held_dependents_counters_follow_its_prerequisites_endings_as_a_blocked_ones_do(
    drain, ending
):
    first, later = echo.using(delay=3600).enqueue("first"), echo.using(delay=3600).enqueue("x")
    held = echo.using(depends_on=[first, later]).enqueue()
    blocked = echo.using(depends_on=[first, later]).enqueue()
    operations.hold_job(held)
    finish = operations.complete_job if ending == "succeeded" else operations.fail_job
    finish(first, "done" if ending == "succeeded" else "rejected")

    expected = (1, 1 if ending == "succeeded" else 0)  # one still open; succeeded so far
    row = fresh(held)
    assert (row.status, row.waiting_on, row.prerequisites_succeeded) == ("held", *expected)
    if ending == "succeeded":  # the blocked one counted the same (the failure cancelled it)
        row = fresh(blocked)
        assert (row.status, row.waiting_on, row.prerequisites_succeeded) == ("blocked", *expected)
    assert_counters_match_jobs(held.workflow_id)


def test_a_held_job_keeps_its_unique_key():
    job = add.using(unique_key="k").enqueue(1, 1)
    operations.hold_job(job)
    again = add.using(unique_key="k").enqueue(2, 2)
    assert again.pk == job.pk and again.duplicate


@pytest.mark.parametrize(
    ("finish", "ending"),
    [
        (operations.cancel_job, "cancelled"),
        (lambda job: operations.complete_job(job, "ok"), "succeeded"),
        (lambda job: operations.fail_job(job, "no"), "failed"),
    ],
)
def test_a_held_job_can_be_cancelled_completed_or_failed(finish, ending):
    first, second = chain(echo.s(1), echo.s()).enqueue().jobs.order_by("id")
    operations.hold_job(first)
    assert finish(first).count == 1
    assert fresh(first).status == ending
    assert fresh(second).status == ("ready" if ending == "succeeded" else "cancelled")
    assert_counters_match_jobs(first.workflow_id)


def test_cancel_workflow_cancels_its_held_jobs():
    first, second = chain(echo.s(1), echo.s()).enqueue().jobs.order_by("id")
    operations.hold_job(second)
    operations.cancel_workflow(first.workflow_id)
    assert statuses(first, second) == ["cancelled", "cancelled"]
    assert assert_counters_match_jobs(first.workflow_id).status == "cancelled"
