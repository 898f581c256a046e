"""Durable steps and sleeps (``context.step``, ``context.sleep``): a step's function runs once per
job, its result answered from its checkpoint when the body runs again (a retry, the end of a
sleep); a sleep parks the job ``scheduled`` without charging the attempt. The SIGKILL case is in
tests/acceptance/test_durable_steps.py.
"""

from __future__ import annotations

import datetime as dt

import pytest

from django_workqueue.context import JobContext
from django_workqueue.db import driver_for
from django_workqueue.exceptions import InvalidOption, NaiveDatetime, PayloadNotJSON, Sleeping
from django_workqueue.models import Checkpoint, Job
from django_workqueue.states import Status
from django_workqueue.testing import drain as drain_here
from testproject.testapp.models import Effect
from tests.support import durable_tasks
from tests.support.database import db_now, fresh
from tests.support.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _forget_calls():
    durable_tasks.calls.clear()


def context_of(job: Job, owner: str = "worker-a") -> JobContext:
    """A context of ``job``'s next attempt, claimed as a worker would."""
    driver = driver_for("default")
    claimed = driver.claim_job(job.pk, owner)
    assert claimed is not None
    return JobContext(claimed, owner=owner, driver=driver)


def another_run(context: JobContext, owner: str = "worker-b") -> JobContext:
    """A second run of the same job (one that took it over, or a later attempt)."""
    return JobContext(context.job, owner=owner, driver=driver_for("default"))


def calls_of(job: Job) -> list[tuple[int, str]]:
    return [(attempt, name) for job_id, attempt, name in durable_tasks.calls if job_id == job.pk]


def wake_now(job: Job) -> None:
    """Bring the job's sleep to an end: its time has come (the test's clock)."""
    past = db_now() - dt.timedelta(seconds=1)
    Checkpoint.objects.filter(job=job, kind=Checkpoint.Kind.SLEEP).update(wakes_at=past)
    Job.objects.filter(pk=job.pk).update(run_after=past)


# --- steps --------------------------------------------------------------------------------------


def test_a_retry_gets_the_step_from_its_checkpoint(drain):
    job = durable_tasks.step_then_fails_once.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == (Status.SUCCEEDED, 2)
    assert calls_of(job) == [(1, "charge")]  # not called again by attempt 2
    assert job.result == {"step": "charge", "attempt": 1}
    stored = Checkpoint.objects.get(job=job)
    assert (stored.kind, stored.name, stored.result) == ("step", "charge", job.result)


def test_an_atomic_tasks_failed_attempt_rolls_back_the_step_and_its_checkpoint(drain):
    job = durable_tasks.atomic_step_then_fails_once.enqueue("shipped")

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == (Status.SUCCEEDED, 2)
    # Attempt 1's step ran, and rolled back with its Effect; attempt 2 ran it again.
    assert calls_of(job) == [(1, "write"), (2, "write")]
    assert list(Effect.objects.filter(job_id=job.pk).values_list("attempt", flat=True)) == [2]
    assert list(Checkpoint.objects.filter(job=job).values_list("result", flat=True)) == [
        {"step": "write", "attempt": 2}
    ]


def test_a_step_returns_what_later_runs_get_back():
    """The first run gets the stored JSON too (a tuple comes back as a list every time)."""
    job = JobFactory(task_name=durable_tasks.runs_a_step.name)
    context = context_of(job)

    assert context.step("pair", lambda: (1, "a")) == [1, "a"]
    assert another_run(context).step("pair", lambda: pytest.fail("ran again")) == [1, "a"]


def test_a_step_name_used_twice_in_one_run_is_refused_at_the_call():
    context = context_of(JobFactory(task_name=durable_tasks.runs_a_step.name))
    context.step("fetch", lambda: 1)

    with pytest.raises(InvalidOption, match="'fetch' twice in one run"):
        context.step("fetch", lambda: 2)


@pytest.mark.parametrize("name", ["", "x" * 201, 7, "nul\x00"])
def test_a_step_name_must_be_storable_text(name):
    context = context_of(JobFactory(task_name=durable_tasks.runs_a_step.name))

    with pytest.raises(InvalidOption, match=r"context\.step: name"):
        context.step(name, lambda: 1)


def test_a_result_that_cannot_be_stored_raises_the_payload_error_at_the_call():
    job = JobFactory(task_name=durable_tasks.runs_a_step.name)
    context = context_of(job)

    with pytest.raises(PayloadNotJSON, match=r"the step 'when' of .* returned a value that"):
        context.step("when", lambda: dt.datetime.now(dt.UTC))
    assert not Checkpoint.objects.filter(job=job).exists()


def test_the_first_stored_result_stands_when_two_runs_store_one_step():
    """A worker that lost the job's lease and the one that took it over: both get the first."""
    job = JobFactory(task_name=durable_tasks.runs_a_step.name)
    stale = context_of(job)
    current = another_run(stale)

    def store_from_the_other_run_first() -> str:
        assert current.step("s", lambda: "current's") == "current's"
        return "stale's"

    assert stale.step("s", store_from_the_other_run_first) == "current's"
    assert list(Checkpoint.objects.filter(job=job).values_list("result", flat=True)) == [
        "current's"
    ]


# --- sleeps -------------------------------------------------------------------------------------


def test_a_sleep_parks_the_job_scheduled_without_charging_the_attempt(drain):
    job = durable_tasks.sleeps_between_steps.enqueue(3600)
    before = db_now()

    drain()

    job = fresh(job)
    assert job.status == Status.SCHEDULED
    # Claimed once, nothing spent of either budget, max_attempts as the task says.
    assert (job.attempt, job.attempts_charged, job.crashes_charged, job.max_attempts) == (
        1,
        0,
        0,
        3,
    )
    assert job.lease_owner is None and job.lease_expires_at is None
    sleep = Checkpoint.objects.get(job=job, kind=Checkpoint.Kind.SLEEP)
    assert sleep.name == "1"
    assert sleep.wakes_at is not None
    assert before + dt.timedelta(seconds=3600) <= sleep.wakes_at <= job.run_after
    assert calls_of(job) == [(1, "before")]
    assert job.errors == []


def test_the_body_resumes_after_its_sleep_with_its_steps_answered_from_checkpoints(drain):
    job = durable_tasks.sleeps_between_steps.enqueue(3600)
    drain()

    wake_now(job)
    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == (Status.SUCCEEDED, 2)
    assert calls_of(job) == [(1, "before"), (2, "after")]
    assert job.result == [{"step": "before", "attempt": 1}, {"step": "after", "attempt": 2}]


def test_a_job_run_before_its_sleep_ends_sleeps_what_is_left(drain):
    """An operator's retry (or anything that runs it early) does not cut the sleep short."""
    job = durable_tasks.sleeps_between_steps.enqueue(3600)
    drain()
    wakes_at = Checkpoint.objects.get(job=job, kind="sleep").wakes_at
    Job.objects.filter(pk=job.pk).update(run_after=db_now(), status=Status.READY)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == (Status.SCHEDULED, 2)
    assert job.run_after >= wakes_at
    assert Checkpoint.objects.get(job=job, kind="sleep").wakes_at == wakes_at
    assert calls_of(job) == [(1, "before")]


def test_sleep_zero_goes_on_at_once(drain):
    job = durable_tasks.sleeps_between_steps.enqueue(0)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == (Status.SUCCEEDED, 1)


def test_sleep_in_an_atomic_task_commits_the_body_so_far_with_its_checkpoints(drain):
    job = durable_tasks.atomic_sleeps_after_a_write.enqueue("written")

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.attempts_charged, job.max_attempts) == (
        Status.SCHEDULED,
        1,
        0,
        3,
    )
    assert Effect.objects.filter(job_id=job.pk).count() == 1
    assert set(Checkpoint.objects.filter(job=job).values_list("kind", flat=True)) == {
        "step", "sleep",
    }  # fmt: skip

    wake_now(job)
    drain()

    job = fresh(job)
    assert (job.status, job.result) == (Status.SUCCEEDED, 1)  # the write was not repeated


def test_drain_runs_sleepers_whose_time_came():
    job = durable_tasks.sleeps_between_steps.enqueue(3600)
    drain_here()
    assert fresh(job).status == Status.SCHEDULED

    wake_now(job)
    drain_here()

    assert fresh(job).status == Status.SUCCEEDED


def test_sleep_until_takes_an_aware_datetime():
    context = context_of(JobFactory(task_name=durable_tasks.runs_a_step.name))

    with pytest.raises(NaiveDatetime, match="naive datetime"):
        context.sleep_until(dt.datetime(2030, 1, 1))
    with pytest.raises(Sleeping) as sleeping:
        context.sleep_until(db_now() + dt.timedelta(hours=2))
    assert 7000 < sleeping.value.delay <= 7200


@pytest.mark.parametrize("seconds", [-1, "10", float("nan"), True])
def test_sleep_takes_a_number_of_seconds(seconds):
    context = context_of(JobFactory(task_name=durable_tasks.runs_a_step.name))

    with pytest.raises(InvalidOption, match=r"context\.sleep: seconds"):
        context.sleep(seconds)
    assert not Checkpoint.objects.exists()


def test_a_sleep_inside_a_transaction_the_body_opened_is_refused(drain):
    """The block would roll back the sleep's checkpoint with the snooze: the job would sleep
    again each time it woke."""
    job = durable_tasks.sleeps_inside_its_own_transaction.enqueue()

    drain()

    job = fresh(job)
    assert job.status == Status.FAILED
    assert job.errors[-1]["type"] == "django_workqueue.exceptions.InvalidOption"
    assert "inside a transaction.atomic() block" in job.errors[-1]["message"]
    assert not Checkpoint.objects.filter(job=job).exists()
