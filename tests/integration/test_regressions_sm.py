"""Regressions found by the state-machine property test (tests/chaos/test_state_machine.py).
Both databases.
"""

from __future__ import annotations

import logging

import pytest

from django_workqueue.db import ClaimedJob, Outcome, OutcomeKind, driver_for
from django_workqueue.models import Job
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from testproject.testapp.tasks import add
from tests.support.database import expire_and_reap

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "worker-that-stalled"


def reclaimed_by_the_same_worker() -> tuple[ClaimedJob, ClaimedJob]:
    """Attempt 1 of a job, reaped while its body still ran, then claimed again as attempt 2 by
    the same worker (the runner keeps both bodies running: see ``Worker._fill``)."""
    driver = driver_for("default")
    job = add.enqueue(1, 2)
    [first] = driver.claim(["default"], 1, OWNER)
    with expire_and_reap(job):
        pass
    [second] = driver.claim(["default"], 1, OWNER)
    assert (second.id, second.attempt) == (first.id, 2)
    return first, second


def outcome(job: ClaimedJob, kind: OutcomeKind) -> Outcome:
    failed = kind != OutcomeKind.SUCCEEDED
    return Outcome(
        job_id=job.id, attempt=job.attempt, kind=kind, max_attempts=job.max_attempts,
        result_json=None if failed else f'"attempt {job.attempt}"',
        error={"type": "ValueError", "message": "boom"} if failed else None,
    )  # fmt: skip


@pytest.mark.parametrize("skip_locked", [True, False])
def test_a_batch_with_two_attempts_of_one_job_reports_only_the_current_one_written(
    skip_locked: bool,
) -> None:
    """The worker batches the outcomes its slots hand over. A stale attempt's late outcome and
    the current attempt's outcome of the same job can share one batch; the fence wrote only
    the current one, but the driver answered with job ids, so the stale outcome was reported
    written too."""
    stale, current = reclaimed_by_the_same_worker()
    batch = [outcome(stale, OutcomeKind.SUCCEEDED), outcome(current, OutcomeKind.RETRY)]

    recorded = driver_for("default").record_many(OWNER, batch, skip_locked=skip_locked)

    assert recorded.written == {(current.id, 2)}
    assert recorded.busy == set()
    job = Job.objects.get(pk=current.id)
    assert (job.status, job.attempt, job.result) == (Status.READY, 2, None)
    assert [error["attempt"] for error in job.errors] == [1, 2]  # the reaper's, attempt 2's


def test_the_worker_logs_a_stale_outcome_dropped_from_a_shared_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fencing promise: a stale worker's late write changes nothing and is logged, also
    when it shares a batch with the current attempt's outcome of the same job (it was not
    logged: the worker took it for written)."""
    stale, current = reclaimed_by_the_same_worker()
    worker = Worker(worker_id=OWNER)
    worker.completer.hand_over(outcome(stale, OutcomeKind.SUCCEEDED))
    worker.completer.hand_over(outcome(current, OutcomeKind.SUCCEEDED))

    with caplog.at_level(logging.WARNING, logger="django_workqueue.worker"):
        worker._flush()

    dropped = [r.args for r in caplog.records if "no longer holds the lease" in r.msg]
    assert dropped == [(stale.id, 1, OutcomeKind.SUCCEEDED)]
    job = Job.objects.get(pk=current.id)
    assert (job.status, job.attempt, job.result) == (Status.SUCCEEDED, 2, "attempt 2")
