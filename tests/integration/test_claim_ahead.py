"""Claim ahead of free slots in the database: the claim into the buffer, the write that says a
buffered job began, and the reaper telling a job that began from one only claimed. Both
databases; the worker's side with real processes is in tests/acceptance/test_claim_ahead.py.
"""

from __future__ import annotations

import datetime as dt
import time
from unittest import mock

import pytest

from django_workqueue.db import driver_for
from django_workqueue.maintenance import reaper
from django_workqueue.models import Job
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from tests.support.database import db_now, fresh
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings

OWNER = "worker-a"

pytestmark = pytest.mark.django_db


def claim(limit: int = 10, *, ahead: bool) -> list[int]:
    return [job.id for job in driver_for("default").claim(["default"], limit, OWNER, ahead=ahead)]


def test_a_claim_ahead_marks_its_jobs_and_takes_only_jobs_never_claimed_before():
    released = JobFactory(attempt=1)  # claimed once, given back: never claimed ahead again
    fresh_jobs = JobFactory.create_batch(2)

    assert claim(ahead=True) == [job.pk for job in fresh_jobs]

    assert all(fresh(job).claimed_ahead for job in fresh_jobs)
    assert all(fresh(job).status == Status.RUNNING for job in fresh_jobs)
    assert fresh(released).status == Status.READY
    assert claim(ahead=False) == [released.pk]  # the plain claim takes it, marked begun
    assert not fresh(released).claimed_ahead


def test_every_claim_but_one_ahead_marks_its_jobs_begun():
    job = JobFactory()
    Job.objects.filter(pk=job.pk).update(claimed_ahead=True)  # left over from a release

    assert claim(ahead=False) == [job.pk]

    assert not fresh(job).claimed_ahead


def test_began_clears_the_mark_of_the_owners_attempt_only():
    ours, other_attempt, other_owner = JobFactory.create_batch(3)
    claim(ahead=True)
    Job.objects.filter(pk=other_owner.pk).update(lease_owner="worker-b")
    Job.objects.filter(pk=other_attempt.pk).update(attempt=2)

    written = driver_for("default").began(
        OWNER, [(ours.pk, 1), (other_attempt.pk, 1), (other_owner.pk, 1)]
    )

    assert written == {ours.pk}
    assert not fresh(ours).claimed_ahead
    assert fresh(other_attempt).claimed_ahead and fresh(other_owner).claimed_ahead
    assert driver_for("default").began(OWNER, []) == set()


def test_the_reaper_gives_a_job_that_never_began_back_uncharged_and_charges_one_that_began():
    began, buffered = JobFactory.create_batch(2)
    claim(ahead=True)
    driver_for("default").began(OWNER, [(began.pk, 1)])

    assert reaper.run_once(now=db_now() + dt.timedelta(hours=1)) == 2

    began, buffered = fresh(began), fresh(buffered)
    assert (buffered.status, buffered.attempt) == (Status.READY, 1)
    assert (buffered.attempts_charged, buffered.crashes_charged) == (0, 0)
    assert buffered.errors == [] and buffered.lease_owner is None
    assert (began.status, began.attempt) == (Status.READY, 1)
    assert (began.attempts_charged, began.crashes_charged) == (0, 1)
    assert [error["type"] for error in began.errors] == ["LeaseExpired"]


def test_a_job_given_back_unbegun_is_claimed_next_for_a_slot_and_its_crash_charged():
    """The bound on the window between a slot taking a buffered job and the database learning
    it began: a job given back as never begun is never claimed ahead again."""
    job = JobFactory()
    claim(ahead=True)
    reaper.run_once(now=db_now() + dt.timedelta(hours=1))  # given back uncharged

    assert claim(ahead=True) == []
    assert claim(ahead=False) == [job.pk]
    reaper.run_once(now=db_now() + dt.timedelta(hours=1))

    assert (fresh(job).attempt, fresh(job).crashes_charged) == (2, 1)


@pytest.mark.django_db(transaction=True)
def test_a_drain_with_a_buffer_runs_every_job_once(drain):
    jobs = JobFactory.create_batch(12)
    with workqueue_settings(CLAIM_AHEAD=1):
        worker = drain(concurrency=2)

    assert worker.ahead.enabled
    rows = Job.objects.filter(pk__in=[job.pk for job in jobs])
    assert set(rows.values_list("status", "attempt")) == {(Status.SUCCEEDED, 1)}
    assert worker.claimed_count == 12 and not worker.ahead
    assert worker.ahead.total > 0  # some went through the buffer


@pytest.mark.parametrize("value", [-1, 4.5, "1", True, None, float("nan")])
def test_a_bad_claim_ahead_stops_the_worker_with_the_setting_named(value):
    with workqueue_settings(CLAIM_AHEAD=value), pytest.raises(ValueError) as raised:
        Worker(concurrency=2)
    assert str(raised.value).startswith('WORKQUEUE["CLAIM_AHEAD"] must be ')


def test_a_worker_with_per_queue_or_autoscaling_slots_never_claims_ahead():
    with workqueue_settings(CLAIM_AHEAD=1):
        assert not Worker(queue_slots={"default": 2, "mail": 1}).ahead.enabled
        assert not Worker(concurrency=2, max_concurrency=8).ahead.enabled
        assert Worker(concurrency=2).ahead.room(2) == 2


def _pass(worker: Worker) -> None:
    """One claiming pass of ``worker``'s control thread (no slot runs: what it hands to the
    slots stays handed)."""
    worker._poll_now = True
    worker._fill()


def test_the_buffer_holds_at_most_its_bound_over_many_passes():
    JobFactory.create_batch(10)
    with workqueue_settings(CLAIM_AHEAD=1):
        worker = Worker(concurrency=2)
        for _ in range(3):
            _pass(worker)

    assert worker._executing == 2 and len(worker.ahead) == 2
    assert Job.objects.filter(status=Status.RUNNING).count() == 4
    assert Job.objects.filter(status=Status.RUNNING, claimed_ahead=True).count() == 2
    assert Job.objects.filter(status=Status.READY).count() == 6


def test_a_worker_with_every_slot_busy_claims_ahead_only_while_claims_come_back_full():
    """No backlog seen: a job enqueued now is left to a worker with a free slot."""
    JobFactory()
    with workqueue_settings(CLAIM_AHEAD=1):
        worker = Worker(concurrency=1)
        _pass(worker)  # its one slot's job; the claim ahead found nothing more
        late = JobFactory()
        _pass(worker)

    assert worker._executing == 1 and len(worker.ahead) == 0
    assert fresh(late).status == Status.READY


def test_a_worker_that_saw_a_backlog_keeps_its_buffer_full_with_every_slot_busy():
    JobFactory.create_batch(2)
    with workqueue_settings(CLAIM_AHEAD=1):
        worker = Worker(concurrency=1)
        _pass(worker)  # one for the slot, one ahead: all it asked for
        worker.ahead.take()  # the slot would take it...
        late = JobFactory()
        _pass(worker)  # ...and the next pass refills the buffer

    assert fresh(late).status == Status.RUNNING and fresh(late).claimed_ahead


def test_a_buffered_jobs_timeout_runs_from_its_take_not_from_its_claim():
    JobFactory.create_batch(2, task_name="testproject.testapp.tasks.times_out")  # timeout 0.3 s
    with workqueue_settings(CLAIM_AHEAD=1):
        worker = Worker(concurrency=1)
        _pass(worker)
    (buffered, item), = list(worker.ahead._jobs)  # fmt: skip

    worker._check_timeouts(dict(worker._running), time.monotonic() + 60)

    assert item.context.abort_reason is None  # still waiting for a slot: not timed out
    assert worker._running[next(iter(set(worker._running) - {buffered.id}))].context.timed_out


def test_a_take_whose_row_was_locked_is_written_on_a_later_pass():
    JobFactory.create_batch(2)
    with workqueue_settings(CLAIM_AHEAD=1):
        worker = Worker(concurrency=1)
        _pass(worker)
        (buffered, _), = list(worker.ahead._jobs)  # fmt: skip
        worker.ahead.take()  # a slot took it
        with mock.patch.object(worker.driver, "began", return_value=set()):
            _pass(worker)  # its row was locked: skipped
        assert Job.objects.get(pk=buffered.id).claimed_ahead
        _pass(worker)

    assert not Job.objects.get(pk=buffered.id).claimed_ahead


@pytest.mark.django_db(transaction=True)
def test_a_take_written_in_a_pass_that_rolled_back_is_written_again():
    """A pass writes its outcomes, the takes and its claim in one transaction: when that
    transaction rolls back (here its claim fails and the pass is done apart), the take it wrote
    is undone with it, and written again, or the job's crash would go uncharged."""
    from tests.integration.test_worker import _hand_over, _success

    JobFactory.create_batch(3)
    with workqueue_settings(CLAIM_AHEAD=1):
        worker = Worker(concurrency=1, poll_interval=3600)
        _pass(worker)  # one job for the slot, one into the buffer
        (buffered, _), = list(worker.ahead._jobs)  # fmt: skip
        _hand_over(worker, _success)  # the slot's job ended: its outcome is to be written
        worker.ahead.take()  # the slot took the buffered job
        claim = worker.claimer.claim
        calls = []

        def fails_once(queues, limit):
            calls.append(limit)
            if len(calls) == 1:
                raise ValueError("a claim the database refused")
            return claim(queues, limit)

        with mock.patch.object(worker.claimer, "claim", side_effect=fails_once):
            worker._poll_now = True
            worker._tick()

    assert len(calls) == 2  # the pass's claim, then its claim apart
    assert Job.objects.filter(status=Status.SUCCEEDED).count() == 1
    assert not Job.objects.get(pk=buffered.id).claimed_ahead


def test_slots_taking_from_a_full_buffer_wake_the_control_thread_once_per_pass():
    """Under a backlog, a slot that ran a job and takes its next from the buffer leaves the
    write of its outcome and of its take to a pass that comes soon: the control thread is
    woken by the take that leaves the buffer at half its bound, not by every one, and that
    pass writes them all."""
    from tests.integration.test_worker import _success

    JobFactory.create_batch(12)
    with workqueue_settings(CLAIM_AHEAD=4):
        worker = Worker(concurrency=2, poll_interval=3600)
        _pass(worker)  # one job for each slot, 8 into the buffer (its bound)
        running = [worker._inbox.get_nowait() for _ in range(2)]
        ended = []

        def slot_ends_one() -> bool:
            """A slot's job ends and the slot takes its next; whether that woke the
            control thread."""
            job, item = running.pop(0)
            with worker._lock:
                worker._executing -= 1
                item.context.finished = True
                worker.completer.hand_over(_success(job), item.started)
            worker.wake.clear()
            handed = worker._take(True)
            running.append(handed)
            ended.append(job.id)
            return worker.wake.is_set()

        assert slot_ends_one()  # the control thread was asleep for long: woken
        worker._sleep_for()  # it looks before its next sleep: a take waits, it sleeps briefly
        assert worker.planner.deferring
        assert [slot_ends_one() for _ in range(3)] == [False, False, True]  # 4 left: refill
        worker._poll_now = True  # woken
        worker._tick()

    assert Job.objects.filter(pk__in=ended, status=Status.SUCCEEDED).count() == 4
    still_running = Job.objects.filter(pk__in=[job.id for job, _ in running])
    assert set(still_running.values_list("status", "claimed_ahead")) == {(Status.RUNNING, False)}
    assert len(worker.ahead) == 6  # refilled with the 2 jobs left
