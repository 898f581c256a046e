"""The one lock order (workflow/locks.py): a worker's completion and each other writer of a
workflow's jobs never wait for each other in a circle.

PostgreSQL only, by design: the order is one of row locks, and SQLite has one writer at a
time. Each test forces the interleaving in which the other order deadlocks: a third session
holds a row both writers need, the writer under test takes what it takes before that row,
and then the worker's completion comes. In the one order, the writer under test holds the
workflow's row by then, so the worker's write (which never waits for a workflow row, it
takes it ``SKIP LOCKED``) keeps its outcome for its next pass instead of holding a job row
the other needs.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from django_workqueue import group, operations
from django_workqueue.db import Recorded, driver_for
from django_workqueue.models import Dependency, Job
from django_workqueue.outcomes import Outcome, OutcomeKind
from django_workqueue.states import Status
from django_workqueue.workflow import release
from django_workqueue.workflow.store import Spawn
from testproject.testapp.tasks import echo
from tests.support.database import in_another_session, sessions_waiting_for_a_lock
from tests.support.waiting import wait_until
from tests.support.workflows import assert_counters_match_jobs, statuses

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres_only]

OWNER = "worker-lock-order"


def running(job: Job, owner: str = OWNER) -> Job:
    """``job`` as a worker's running attempt 1."""
    Job.objects.filter(pk=job.pk).update(
        status=Status.RUNNING, attempt=1, lease_owner=owner, started_at=timezone.now(),
        lease_expires_at=timezone.now() + dt.timedelta(minutes=5),
    )  # fmt: skip
    return job


def success(job: Job, spawn: Spawn | None = None) -> Outcome:
    return Outcome(
        job_id=job.pk, attempt=1, kind=OutcomeKind.SUCCEEDED, max_attempts=1,
        result_json='"done"', task_name=job.task_name, queue=job.queue, spawn=spawn,
    )  # fmt: skip


def race_a_workers_completion(
    hold_row: Callable[..., threading.Event],
    held: Job,
    writer: Callable[[], Any],
    worker_job: Job,
) -> Any:
    """``held``'s row locked by a third session; ``writer`` starts and waits for it; then
    the worker's completion of ``worker_job`` (the completer's write: ``skip_locked``) comes,
    and waits too or keeps its outcome; then ``held`` is let go. Returns what ``writer``
    returned; its outcome kept for later is written once both are done, as the completer's
    next pass would."""
    release_held = hold_row(held.pk)
    written: list[Any] = []
    writing, failures = in_another_session(lambda: written.append(writer()))
    wait_until(lambda: sessions_waiting_for_a_lock() == 1, message="the writer to wait")

    def write() -> Recorded:
        return release.record(driver_for("default"), OWNER, [success(worker_job)], skip_locked=True)

    completed: list[Recorded] = []
    completing, worker_failures = in_another_session(lambda: completed.append(write()))
    wait_until(
        lambda: not completing.is_alive() or sessions_waiting_for_a_lock() == 2,
        message="the worker's completion to wait or keep its outcome",
    )
    release_held.set()
    writing.join(30)
    completing.join(30)
    # Without the one order, PostgreSQL breaks a deadlock by aborting one side: the worker's
    # write or the operation (which tries again, logging it).
    assert failures + worker_failures == []
    [recorded] = completed
    if worker_job.pk in recorded.busy:  # the workflow's row was held: kept, written next pass
        recorded = write()
    assert (worker_job.pk, 1) in recorded.written
    return written[0]


@pytest.fixture
def no_deadlock(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.INFO, logger="django_workqueue")
    yield
    deadlocks = [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()]
    assert deadlocks == []


def test_cancel_workflow_and_a_workers_completion_take_their_locks_in_one_order(
    hold_row, no_deadlock
):
    # A step waiting for a job inserted after it (a continuation's shape, or depends_on on a
    # newer job): the cancellation meets the dependent before the worker's job, in id order.
    wf = group(echo.s("dependent"), echo.s("between"), echo.s("prerequisite")).enqueue()
    dependent, between, prerequisite = wf.jobs.order_by("id")
    Dependency.objects.create(job=dependent, prerequisite=prerequisite, position=0)
    Job.objects.filter(pk=dependent.pk).update(status=Status.BLOCKED, waiting_on=1)
    running(prerequisite)

    result = race_a_workers_completion(
        hold_row, between, lambda: operations.cancel_workflow(wf), prerequisite
    )

    assert (result.action, result.count) == ("cancelled", 3)
    assert statuses(dependent, between, prerequisite) == ["cancelled", "cancelled", "succeeded"]
    assert_counters_match_jobs(wf)


def test_complete_job_of_a_sibling_and_a_workers_completion_take_their_locks_in_one_order(
    hold_row, no_deadlock
):
    wf = group(echo.s("sibling"), echo.s("worker's")).then(echo.s()).enqueue()
    sibling, own, dependent = wf.jobs.order_by("id")
    running(own)

    result = race_a_workers_completion(
        hold_row, dependent, lambda: operations.complete_job(sibling, "outside"), own
    )

    assert result.action == "completed"
    assert statuses(sibling, own, dependent) == ["succeeded", "succeeded", "ready"]
    assert_counters_match_jobs(wf)


def test_a_siblings_context_add_and_a_workers_completion_take_their_locks_in_one_order(
    hold_row, no_deadlock
):
    # The sibling's success is written without skip_locked (Driver.record: tools, tests): it
    # waits for what it needs, in the one order too. (Two workers' writes meet at the
    # workflow's row first, taken SKIP LOCKED: test_workflow_operations.py.)
    wf = group(echo.s("adds a step"), echo.s("worker's")).then(echo.s()).enqueue()
    adding, own, dependent = wf.jobs.order_by("id")
    running(adding, "worker-sibling")
    running(own)
    spawn = Spawn()
    spawn.add(echo.using(delay=3600).s("child"))

    def add() -> Recorded:
        return release.record(driver_for("default"), "worker-sibling", [success(adding, spawn)])

    race_a_workers_completion(hold_row, dependent, add, own)

    [child] = wf.jobs.exclude(pk__in=[adding.pk, own.pk, dependent.pk])
    assert statuses(adding, own, dependent, child) == [
        "succeeded", "succeeded", "blocked", "scheduled",
    ]  # fmt: skip
    assert Job.objects.get(pk=dependent.pk).waiting_on == 1  # the child
    assert_counters_match_jobs(wf)


def test_an_operation_on_a_job_that_joins_a_workflow_while_it_waits_locks_that_workflow_first(
    no_deadlock,
):
    # The job is in no workflow when complete_job reads it; a job naming it and a step of a
    # workflow in depends_on (not committed yet) makes it join that workflow meanwhile. The
    # operation then takes its locks again, the workflow's first (locks.lock_jobs).
    from django.db import transaction

    lone = echo.using(delay=3600).enqueue("lone")
    wf = group(echo.using(delay=3600).s("step")).enqueue()
    [step] = wf.jobs.all()
    written, commit = threading.Event(), threading.Event()

    def join() -> None:
        with transaction.atomic():
            echo.using(depends_on=[step, lone]).enqueue("dependent")
            written.set()
            assert commit.wait(30)

    joiner, join_failed = in_another_session(join)
    assert written.wait(10)
    result: list[Any] = []
    completer, complete_failed = in_another_session(
        lambda: result.append(operations.complete_job(lone, "done"))
    )
    wait_until(lambda: sessions_waiting_for_a_lock() == 1, message="complete_job to wait")
    commit.set()
    joiner.join(30)
    completer.join(30)

    assert (join_failed, complete_failed) == ([], [])
    assert result[0].action == "completed"
    assert Job.objects.get(pk=lone.pk).workflow_id == wf.pk
    assert_counters_match_jobs(wf)
