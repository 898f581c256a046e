"""Operations on sets of jobs chosen by a filter: cancel_jobs and redrive, in batches."""

from __future__ import annotations

import pytest
from django.db import connection

from django_workqueue import chain, operations
from django_workqueue.context import AbortReason
from django_workqueue.db import driver_for
from django_workqueue.models import Job
from django_workqueue.operations import jobs as job_operations
from django_workqueue.states import Status
from testproject.testapp.tasks import add, echo, send_mail
from tests.support.database import fresh
from tests.support.factories import JobFactory
from tests.support.workflows import assert_counters_match_jobs, statuses, unmet_entry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rows each transaction of cancel_jobs / redrive was given, and whether it was
    its own transaction (the one ``db.locking.operation`` opens for it, nested in no other)."""
    sizes: list[int] = []
    cancel_batch, redrive_atomic = job_operations._cancel_batch, job_operations._redrive_atomic

    def cancelling(db, ids):
        assert len(connection.atomic_blocks) == 1
        sizes.append(len(ids))
        return cancel_batch(db, ids)

    def redriving(rows, target, budget):
        assert len(connection.atomic_blocks) == 1
        sizes.append(rows.count())
        return redrive_atomic(rows, target, budget)

    monkeypatch.setattr(job_operations, "_cancel_batch", cancelling)
    monkeypatch.setattr(job_operations, "_redrive_atomic", redriving)
    return sizes


def test_cancel_jobs_cancels_the_waiting_jobs_of_a_filter_and_nothing_else():
    mails = [send_mail.enqueue(f"{n}@example.com") for n in range(3)]
    held = send_mail.enqueue("held@example.com")
    operations.hold_job(held)
    other = add.enqueue(1, 1)
    done = JobFactory(queue="mail", status=Status.SUCCEEDED)
    result = operations.cancel_jobs(Job.objects.filter(queue="mail"))
    assert (result.action, result.count) == ("cancelled", 4)
    assert result.message == "4 waiting job(s) cancelled, 0 running job(s) asked to stop"
    assert statuses(*mails, held, other, done) == ["cancelled"] * 4 + ["ready", "succeeded"]
    assert all(fresh(job).finished_at is not None for job in mails)
    again = operations.cancel_jobs(Job.objects.filter(queue="mail"))
    assert (again.action, again.count) == ("unchanged", 0)


def test_cancel_jobs_asks_running_jobs_to_stop():
    running = JobFactory(running=True)
    waiting = add.enqueue(1, 1)
    result = operations.cancel_jobs([running.pk, waiting])
    assert (result.action, result.count) == ("cancelled", 2)
    assert result.message == "1 waiting job(s) cancelled, 1 running job(s) asked to stop"
    assert fresh(running).status == Status.RUNNING  # its worker ends it
    assert fresh(running).cancel_requested_at is not None
    assert fresh(waiting).status == Status.CANCELLED
    only_running = operations.cancel_jobs(Job.objects.filter(pk=running.pk))
    assert (only_running.action, only_running.count) == ("unchanged", 0)  # asked already


@pytest.mark.postgres_only
def test_cancel_jobs_notifies_the_workers_of_running_jobs():
    from django_workqueue.db.postgresql import ABORT_CHANNEL
    from tests.support.database import listening

    running = JobFactory(running=True)
    with listening() as listener:
        listener.execute(f"LISTEN {ABORT_CHANNEL}")
        operations.cancel_jobs(Job.objects.filter(pk=running.pk))
        heard = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert heard == [f"{running.pk}:{AbortReason.CANCEL_REQUESTED}"]


def test_cancel_jobs_settles_workflows_as_cancel_job_does(drain):
    wf = chain(echo.using(delay=3600).s(1), echo.s()).enqueue()
    first, second = wf.jobs.order_by("id")
    operations.cancel_jobs(Job.objects.filter(pk=first.pk))
    assert statuses(first, second) == ["cancelled", "cancelled"]
    assert unmet_entry(second)["prerequisite"] == first.pk
    assert assert_counters_match_jobs(wf).status == "cancelled"


def test_cancel_jobs_accepts_a_sliced_queryset():
    jobs = [add.enqueue(n, n) for n in range(3)]
    result = operations.cancel_jobs(Job.objects.order_by("-id")[:2])
    assert result.count == 2
    assert statuses(*jobs) == ["ready", "cancelled", "cancelled"]


def test_cancel_jobs_writes_at_most_a_thousand_jobs_per_transaction(batch_sizes):
    add.enqueue_many([((n, n), {}) for n in range(2500)])
    result = operations.cancel_jobs(Job.objects.filter(task_name=add.name))
    assert result.count == 2500
    assert batch_sizes == [1000, 1000, 500]
    assert not Job.objects.exclude(status=Status.CANCELLED).exists()


def test_redrive_writes_at_most_a_thousand_jobs_per_transaction(batch_sizes):
    add.enqueue_many([((n, n), {}) for n in range(2100)])
    send_mail.enqueue_many([((f"{n}@example.com",), {}) for n in range(10)])
    Job.objects.update(status=Status.FAILED, attempt=3)
    result = operations.redrive(Job.objects.all())
    assert result.count == 2110
    assert sorted(batch_sizes) == [110, 1000, 1000]  # each batch, whatever the tasks
    assert max(batch_sizes) <= job_operations.BATCH_SIZE
    assert not Job.objects.exclude(status=Status.READY).exists()
    assert driver_for("default").claim(["default", "mail"], 1, "w")  # claimable again
