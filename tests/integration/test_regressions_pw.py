"""Regressions found by the fault battery's stale-owner, long-job, poison-pill and shutdown tests
(tests/chaos/test_stale_owner.py, test_long_jobs.py, test_poison_pills.py,
test_shutdown_under_load.py). Both databases.
"""

from __future__ import annotations

import pytest

from django_workqueue.models import Job
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from testproject.testapp.tasks import add

pytestmark = pytest.mark.django_db(transaction=True)


class StoppedMidPass(Worker):
    """A worker whose stop request arrives during a pass, after the heartbeat and before the
    claim: where runworker's SIGTERM handler lands when the signal comes in mid-pass (Python
    runs it on the control thread between two statements of the pass)."""

    def _heartbeat(self) -> None:
        self.stop()
        super()._heartbeat()


def test_a_stop_requested_mid_pass_claims_nothing_more() -> None:
    """Documented: after SIGTERM the worker "stops claiming". The pass in which the signal
    arrived used to claim anyway; the job it took ran within the grace, or was released past
    it and ran a second time elsewhere (a needless re-run of its side effects)."""
    job = add.enqueue(1, 2)
    worker = StoppedMidPass(concurrency=1, poll_interval=0.05, grace_seconds=5)

    assert worker.run() == 0

    job.refresh_from_db()
    assert (job.status, job.attempt, job.lease_owner) == (Status.READY, 0, None)
    assert worker.claimed_count == 0
    assert Job.objects.filter(status=Status.RUNNING).count() == 0
