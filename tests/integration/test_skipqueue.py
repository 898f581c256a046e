"""Skip-queue: ``task.using(skip_queue=True).enqueue(...)`` runs the first attempt in the
enqueuing process right after the commit; failures and lost races leave the job to the workers.
The crash of the enqueuing process is in tests/acceptance/test_skip_queue_crash.py.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import pytest
from django.db import connections, transaction

from django_workqueue.db import driver_for
from django_workqueue.exceptions import InvalidOption
from django_workqueue.flow import skipqueue
from django_workqueue.models import Job
from django_workqueue.operations import cancel_job, pause_queue
from django_workqueue.workflow import chain
from testproject.testapp.models import Effect
from testproject.testapp.tasks import (
    add,
    always_fails,
    async_add,
    atomic_effect,
    record,
    wait_for_cancel,
)
from tests.support import flow_tasks
from tests.support.database import db_now, fresh, ledger_with_pids, row_snapshot
from tests.support.factories import JobFactory
from tests.support.observability_tasks import reports_often
from tests.support.settings import workqueue_settings
from tests.support.tasks import sync_customer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def enqueue_in_thread(task: Any, *args: Any, **kwargs: Any) -> threading.Thread:
    """Enqueue on another thread, which runs the attempt there (the test's thread watches)."""

    def enqueue() -> None:
        try:
            task.enqueue(*args, **kwargs)
        finally:
            connections.close_all()

    thread = threading.Thread(target=enqueue, daemon=True)
    thread.start()
    return thread


def test_the_first_attempt_runs_here_before_enqueue_returns():
    job = record.using(skip_queue=True).enqueue(note="now")

    job = fresh(job)
    assert (job.status, job.attempt, job.result, job.lease_owner) == ("succeeded", 1, 1, None)
    assert ledger_with_pids(job) == [(1, "now", os.getpid())]


def test_the_attempt_runs_on_the_calling_thread():
    job = flow_tasks.where_am_i.using(skip_queue=True).enqueue()

    assert fresh(job).result == {"pid": os.getpid(), "thread": threading.get_ident()}


def test_inside_a_transaction_the_attempt_waits_for_the_commit():
    with transaction.atomic():
        job = record.using(skip_queue=True).enqueue(note="at commit")
        assert fresh(job).status == "ready"
        assert ledger_with_pids(job) == []

    assert (fresh(job).status, fresh(job).attempt) == ("succeeded", 1)


def test_a_rolled_back_enqueue_runs_nothing():
    with pytest.raises(LookupError), transaction.atomic():
        record.using(skip_queue=True).enqueue(note="never")
        raise LookupError

    assert not Job.objects.exists()


def test_a_failure_is_recorded_and_left_to_the_workers_retry(drain, caplog):
    caplog.set_level(logging.WARNING, logger="django_workqueue")

    job = always_fails.using(skip_queue=True).enqueue()  # does not raise

    job = fresh(job)
    assert (job.status, job.attempt, job.lease_owner) == ("ready", 1, None)
    assert [e["message"] for e in job.errors] == ["boom on attempt 1"]
    assert "boom on attempt 1" in caplog.text

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("failed", 3)


def test_a_job_a_worker_claimed_first_is_left_to_it():
    with transaction.atomic():
        job = record.using(skip_queue=True).enqueue(note="raced")
        [claimed] = driver_for("default").claim(["default"], 1, "worker-x")
        assert claimed.id == job.pk

    job = fresh(job)
    assert (job.status, job.attempt, job.lease_owner) == ("running", 1, "worker-x")
    assert ledger_with_pids(job) == []


def test_a_job_whose_queue_is_paused_is_left_to_the_workers():
    pause_queue("default")

    job = record.using(skip_queue=True).enqueue(note="paused")

    assert (fresh(job).status, fresh(job).attempt) == ("ready", 0)


def test_a_duplicate_runs_nothing_here():
    holder = sync_customer.enqueue(7)

    job = sync_customer.using(skip_queue=True).enqueue(7)

    assert job.duplicate and job.pk == holder.pk
    assert (fresh(holder).status, fresh(holder).attempt) == ("ready", 0)


def test_an_atomic_task_commits_its_writes_with_the_success():
    job = atomic_effect.using(skip_queue=True).enqueue(value="paid")

    assert (fresh(job).status, fresh(job).result) == ("succeeded", "paid")
    assert list(Effect.objects.filter(job_id=job.pk).values_list("value", flat=True)) == ["paid"]


def test_an_async_task_runs_too():
    job = async_add.using(skip_queue=True).enqueue(2, 3)

    assert (fresh(job).status, fresh(job).result) == ("succeeded", 5)


def test_the_lease_is_renewed_while_the_attempt_runs():
    """lease_seconds=1: without renewals a reaper would take the job back within a second."""
    thread = enqueue_in_thread(flow_tasks.waits_for_gate.using(skip_queue=True))
    job = wait_until(
        lambda: Job.objects.filter(task_name=flow_tasks.waits_for_gate.name, status="running")
        .first(), timeout=10, message="the attempt to start",
    )  # fmt: skip
    first_expiry = job.lease_expires_at
    wait_until(lambda: fresh(job).lease_expires_at > first_expiry, timeout=10, message="a renewal")
    assert fresh(job).lease_owner.startswith(f"skip-queue:{os.getpid()}:")

    flow_tasks.gates.setdefault(job.pk, threading.Event()).set()
    thread.join(20)

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == ("succeeded", 1, "done")


def test_progress_is_written_at_most_once_per_interval_and_the_last_report_lands(monkeypatch):
    writes: list[Any] = []
    driver_class = type(driver_for("default"))
    original = driver_class.write_progress

    def counting(self: Any, owner: str, reports: Any, **kwargs: Any) -> Any:
        writes.append(list(reports))
        return original(self, owner, reports, **kwargs)

    monkeypatch.setattr(driver_class, "write_progress", counting)
    with workqueue_settings(PROGRESS_INTERVAL=3600):
        job = reports_often.using(skip_queue=True).enqueue(1000)

    job = fresh(job)
    assert job.status == "succeeded"
    assert [[report.current for report in batch] for batch in writes] == [[1]]  # the first
    assert (job.progress_current, job.progress_total, job.progress_message) == (
        1000, 1000, "row 1000",
    )  # fmt: skip
    assert job.progress_details == {"row": 1000, "last": [1000, "ok"]}


def test_progress_past_its_interval_is_written_while_the_attempt_runs(monkeypatch):
    writes: list[int] = []
    driver_class = type(driver_for("default"))
    original = driver_class.write_progress

    def counting(self: Any, owner: str, reports: Any, **kwargs: Any) -> Any:
        writes.extend(report.current for report in reports)
        return original(self, owner, reports, **kwargs)

    monkeypatch.setattr(driver_class, "write_progress", counting)
    with workqueue_settings(PROGRESS_INTERVAL=0):  # every report is past the interval
        reports_often.using(skip_queue=True).enqueue(3)

    assert writes == [1, 2, 3]


def test_a_cancellation_requested_while_it_runs_reaches_the_attempt():
    """The heartbeat sees the request, as a worker's does, and the body stops."""
    thread = enqueue_in_thread(wait_for_cancel.using(skip_queue=True), limit=20)
    job = wait_until(
        lambda: Job.objects.filter(task_name=wait_for_cancel.name, status="running").first(),
        timeout=10, message="the attempt to start",
    )  # fmt: skip

    cancel_job(job.pk)
    thread.join(20)

    job = fresh(job)
    assert (job.status, job.attempt) == ("cancelled", 1)


def test_an_error_outside_the_job_never_reaches_the_caller(monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(type(driver_for("default")), "claim_job", broken)

    job = add.using(skip_queue=True).enqueue(1, 2)

    assert (fresh(job).status, fresh(job).attempt) == ("ready", 0)
    assert "could not claim it to run here" in caplog.text


@pytest.mark.parametrize(
    ("build", "args", "problem"),
    [
        (lambda: flow_tasks.limited_task.using(skip_queue=True), (), "concurrency="),
        (lambda: add.using(skip_queue=True, delay=5), (1, 2), "delay or run_at"),
        (lambda: add.using(skip_queue=True, depends_on=[1]), (1, 2), "depends_on"),
    ],
    ids=["flow-control", "delay", "depends-on"],
)
def test_skip_queue_is_refused_where_nothing_could_run_now(build, args, problem):
    with pytest.raises(InvalidOption, match=problem):
        build().enqueue(*args)

    assert not Job.objects.exists()


def test_skip_queue_is_refused_for_a_workflows_step():
    with pytest.raises(InvalidOption, match="workflow's step"):
        chain(add.using(skip_queue=True).s(1, 2), add.s(3)).enqueue()

    assert not Job.objects.exists()


def test_run_job_reports_whether_it_ran():
    job = add.enqueue(1, 2)

    assert skipqueue.run_job(job.pk) is True
    assert skipqueue.run_job(job.pk) is False  # no longer ready
    assert (fresh(job).status, fresh(job).result) == ("succeeded", 3)


# --- Driver.claim_job: the claim of one job by id -------------------------------------------


def test_claim_job_leases_the_job_as_a_claim_does():
    job = JobFactory(lease_seconds=30, attempt=1, max_attempts=5, args=[4, 5])

    claimed = driver_for("default").claim_job(job.pk, "skip-queue:1:abc")

    assert (claimed.id, claimed.attempt, claimed.max_attempts) == (job.pk, 2, 5)
    assert claimed.args == [4, 5]
    job = fresh(job)
    assert (job.status, job.attempt, job.lease_owner) == ("running", 2, "skip-queue:1:abc")
    assert 28 < (job.lease_expires_at - db_now()).total_seconds() <= 30
    assert job.started_at is not None


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "scheduled"},
        {"status": "held"},
        {"status": "blocked", "waiting_on": 1},
        {"status": "succeeded"},
        {"flow_key": "limit:some.task"},
    ],
    ids=["scheduled", "held", "blocked", "succeeded", "flow-controlled"],
)
def test_claim_job_leaves_a_job_that_is_not_plainly_ready(fields):
    job = JobFactory(**fields)
    before = row_snapshot(job)

    assert driver_for("default").claim_job(job.pk, "skip-queue:1:abc") is None

    assert row_snapshot(job) == before


def test_claim_job_leaves_a_job_another_worker_holds():
    job = JobFactory(running=True)
    before = row_snapshot(job)

    assert driver_for("default").claim_job(job.pk, "skip-queue:1:abc") is None

    assert row_snapshot(job) == before
