"""Waiting for a signal (``context.wait_for_signal``, ``operations.send_signal``): the job parks
``waiting`` without charging its attempt and runs again when the signal arrives; a signal sent
before the wait is kept, several are taken in order, one sent in a rolled-back transaction never
arrives, a timeout raises ``SignalTimeout`` at the call, and each wait takes one signal once.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction

from django_workqueue import group, operations
from django_workqueue.context import JobContext
from django_workqueue.db import driver_for
from django_workqueue.exceptions import InvalidOption, PayloadNotJSON, WaitingForSignal
from django_workqueue.maintenance import promoter
from django_workqueue.models import Checkpoint, Job, Signal
from django_workqueue.states import Status
from django_workqueue.workflow import inbox
from tests.support import durable_tasks
from tests.support.database import db_now, fresh
from tests.support.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _forget_calls():
    durable_tasks.calls.clear()


def calls_of(job: Job) -> list[tuple[int, str]]:
    return [(attempt, name) for job_id, attempt, name in durable_tasks.calls if job_id == job.pk]


def waiting(drain, task=durable_tasks.waits_for_approval, *args) -> Job:
    """A job of ``task`` run until it waits."""
    job = task.enqueue(*args)
    drain()
    job = fresh(job)
    assert job.status == Status.WAITING
    return job


def test_a_wait_parks_the_job_waiting_without_charging_the_attempt(drain):
    job = waiting(drain)

    assert (job.attempt, job.attempts_charged, job.crashes_charged, job.max_attempts) == (
        1,
        0,
        0,
        3,
    )
    assert job.lease_owner is None and job.lease_expires_at is None
    wait = Checkpoint.objects.get(job=job, kind=Checkpoint.Kind.WAIT)
    assert (wait.name, wait.signal, wait.result, wait.wakes_at) == ("1", "approve", None, None)
    assert job.errors == []


def test_a_signal_wakes_the_waiting_job_and_is_its_waits_answer(drain):
    job = waiting(drain)

    result = operations.send_signal(job, "approve", {"by": "alice"})

    assert (result.action, result.count) == ("signalled", 1)
    assert "woke 1 waiting job" in result.message
    assert fresh(job).status == Status.READY
    drain()
    job = fresh(job)
    assert (job.status, job.attempt) == (Status.SUCCEEDED, 2)
    assert job.result == [{"step": "before", "attempt": 1}, {"by": "alice"}]
    assert calls_of(job) == [(1, "before")]  # the step did not run again
    signal = Signal.objects.get()
    assert signal.delivered_to == job.pk and signal.delivered_at is not None


def test_a_signal_sent_before_the_wait_is_kept_and_taken_at_once(drain):
    job = durable_tasks.waits_for_approval.enqueue()
    operations.send_signal(job.pk, "approve", "yes")

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result[1]) == (Status.SUCCEEDED, 1, "yes")


def test_signals_of_one_name_are_taken_in_order_one_per_wait(drain):
    job = durable_tasks.waits_twice.enqueue()
    for payload in ("first", "second", "third"):
        operations.send_signal(job, "go", payload)

    drain()

    job = fresh(job)
    assert (job.status, job.result) == (Status.SUCCEEDED, ["first", "second"])
    kept = Signal.objects.filter(delivered_at__isnull=True)
    assert list(kept.values_list("payload", flat=True)) == ["third"]


def test_a_signal_for_another_name_does_not_wake_the_job(drain):
    job = waiting(drain)

    result = operations.send_signal(job, "reject")

    assert "kept until a wait takes it" in result.message
    assert fresh(job).status == Status.WAITING


def test_a_signal_sent_in_a_rolled_back_transaction_never_arrives(drain):
    job = waiting(drain)

    with pytest.raises(RuntimeError), transaction.atomic():
        operations.send_signal(job, "approve", "yes")
        assert fresh(job).status == Status.READY  # woken inside the transaction...
        raise RuntimeError("rolled back")

    assert fresh(job).status == Status.WAITING  # ...and not after it
    assert not Signal.objects.exists()


def test_a_wait_times_out_with_signal_timeout_at_the_call(drain):
    job = waiting(drain, durable_tasks.waits_for_approval, 3600)
    wait = Checkpoint.objects.get(job=job, kind=Checkpoint.Kind.WAIT)
    assert wait.wakes_at is not None and wait.wakes_at > db_now()
    assert promoter.run_once() == 0  # not yet

    Checkpoint.objects.filter(pk=wait.pk).update(wakes_at=db_now() - dt.timedelta(seconds=1))
    assert promoter.run_once() == 1
    assert fresh(job).status == Status.READY
    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == (Status.SUCCEEDED, 2)
    assert job.result[1] == "timed out"
    assert Checkpoint.objects.get(pk=wait.pk).result == {"timed_out": True}
    # A signal after the timeout is not the wait's: the job is finished, it refuses it.
    assert operations.send_signal(job, "approve").action == "unchanged"


def test_the_promoter_counts_on_a_wait_timeout_in_its_next_wake_up(drain):
    waiting(drain, durable_tasks.waits_for_approval, 3600)

    seconds = promoter.Promoter("default", 1.0).seconds_to_next()

    assert seconds is not None and 3500 < seconds <= 3600


def test_cancelling_a_waiting_job_ends_it_at_once(drain):
    job = waiting(drain)

    result = operations.cancel_job(job)

    assert result.action == "cancelled"
    job = fresh(job)
    assert job.status == Status.CANCELLED and job.finished_at is not None
    assert operations.send_signal(job, "approve").action == "unchanged"
    assert not Signal.objects.exists()


def test_a_signal_to_a_finished_job_is_refused(drain):
    job = durable_tasks.step_then_fails_once.enqueue()
    drain()

    result = operations.send_signal(job, "approve", {"late": True})

    assert (result.action, result.count) == ("unchanged", 0)
    assert "already finished" in result.message
    assert not Signal.objects.exists()


def test_a_signal_sent_while_the_body_decides_to_wait_still_wakes_it(drain, monkeypatch):
    """The body finds no signal; one is sent (and committed) before the park is written: the
    park sees it and the job does not wait for ever."""
    take = inbox.take

    def take_then_signal_arrives(alias, job_id, workflow_id, name):
        found = take(alias, job_id, workflow_id, name)
        if not found[0] and not Signal.objects.exists():
            operations.send_signal(job_id, name, "meanwhile")  # the job is running: no wake
        return found

    monkeypatch.setattr(inbox, "take", take_then_signal_arrives)
    job = durable_tasks.waits_for_approval.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result[1]) == (Status.SUCCEEDED, 2, "meanwhile")


def test_a_wait_answered_by_a_stale_run_while_the_current_one_parks_still_wakes_it(
    drain, monkeypatch
):
    """A run that lost the job's lease (its worker stalled) answers the wait between the
    current run's look for a signal, which found none, and its park: the park sees the wait
    answered and wakes the job, which then takes the stored answer. Parked, nothing would ever
    wake it (the fault battery on SQLite found such a job waiting for good)."""
    take = inbox.take

    def stale_run_answers_meanwhile(alias, job_id, workflow_id, name):
        found = take(alias, job_id, workflow_id, name)
        if not found[0] and not Signal.objects.exists():
            operations.send_signal(job_id, name, "to the stale run")  # running: kept
            _, payload = take(alias, job_id, workflow_id, name)  # the stale run takes it
            open_wait = Checkpoint.objects.filter(
                job_id=job_id, kind=Checkpoint.Kind.WAIT, result__isnull=True
            )
            assert open_wait.update(result={"payload": payload}) == 1  # and answers the wait
        return found

    monkeypatch.setattr(inbox, "take", stale_run_answers_meanwhile)
    job = durable_tasks.waits_for_approval.enqueue()

    drain()

    job = fresh(job)
    assert job.status == Status.SUCCEEDED
    assert job.result[1] == "to the stale run"
    assert Signal.objects.get().delivered_to == job.pk


def test_a_signal_to_a_workflow_is_taken_by_one_of_its_jobs_waits(drain):
    workflow = group(durable_tasks.waits_for_approval.s(), durable_tasks.runs_a_step.s("a", 1))
    workflow = workflow.enqueue()
    job = Job.objects.get(workflow=workflow, task_name=durable_tasks.waits_for_approval.name)
    drain()
    assert fresh(job).status == Status.WAITING

    result = operations.send_signal(workflow, "approve", "for the workflow")

    assert "woke 1 waiting job" in result.message
    drain()
    assert fresh(job).result[1] == "for the workflow"
    assert Signal.objects.get().delivered_to == job.pk


def test_an_atomic_tasks_failed_attempt_gives_the_signal_back_to_the_retry(drain):
    job = durable_tasks.atomic_waits_then_fails_once.enqueue()
    operations.send_signal(job, "go", "once")

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == (Status.SUCCEEDED, 2, "once")
    assert calls_of(job) == [(1, "took"), (2, "took")]
    assert Signal.objects.get().delivered_to == job.pk


def test_two_runs_of_one_wait_get_one_answer_and_take_one_signal():
    """A worker that lost the job's lease and the one that took it over both reach the wait:
    the first answer stands, and the second signal stays kept."""
    job = JobFactory(task_name=durable_tasks.waits_twice.name)
    driver = driver_for("default")
    claimed = driver.claim_job(job.pk, "worker-a")
    stale = JobContext(claimed, owner="worker-a", driver=driver)
    current = JobContext(claimed, owner="worker-b", driver=driver)
    operations.send_signal(job, "go", "first")
    operations.send_signal(job, "go", "second")

    assert current.wait_for_signal("go") == "first"
    assert stale.wait_for_signal("go") == "first"
    kept = Signal.objects.filter(delivered_at__isnull=True)
    assert list(kept.values_list("payload", flat=True)) == ["second"]


def test_wait_without_a_signal_raises_waiting_for_signal_to_park():
    job = JobFactory(task_name=durable_tasks.waits_twice.name)
    driver = driver_for("default")
    context = JobContext(driver.claim_job(job.pk, "w"), owner="w", driver=driver)

    with pytest.raises(WaitingForSignal) as parked:
        context.wait_for_signal("go", timeout=dt.timedelta(minutes=5))

    assert parked.value.name == "go" and 290 < parked.value.delay <= 300


@pytest.mark.parametrize("name", ["", "x" * 201, None])
def test_send_signal_checks_the_name(name):
    job = JobFactory()
    with pytest.raises(InvalidOption, match=r"send_signal: name"):
        operations.send_signal(job, name)


def test_send_signal_checks_the_payload():
    job = JobFactory()
    with pytest.raises(PayloadNotJSON, match=r"send_signal\('go'\): the payload"):
        operations.send_signal(job, "go", {"at": dt.datetime.now(dt.UTC)})
    assert not Signal.objects.exists()


def test_send_signal_to_a_job_that_does_not_exist_raises():
    with pytest.raises(Job.DoesNotExist):
        operations.send_signal(999_999, "go")


def test_cancelling_a_workflow_cancels_its_waiting_steps(drain):
    workflow = group(durable_tasks.waits_for_approval.s(), durable_tasks.waits_twice.s()).enqueue()
    drain()
    assert set(Job.objects.filter(workflow=workflow).values_list("status", flat=True)) == {
        Status.WAITING
    }

    operations.cancel_workflow(workflow)

    statuses = set(Job.objects.filter(workflow=workflow).values_list("status", flat=True))
    assert statuses == {Status.CANCELLED}
    workflow.refresh_from_db()
    assert workflow.status == "cancelled"
