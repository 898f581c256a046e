"""Three ``runworker`` processes elect one maintainer: only it runs the maintenance services;
SIGKILLed, it is replaced at once (liveness) and the fleet's maintenance goes on (a delayed job is
promoted, an expired lease reaped); stopped with SIGTERM, it hands the lease over."""

from __future__ import annotations

import datetime as dt
import signal

import pytest

from django_workqueue.db import driver_for
from django_workqueue.maintenance.maintainer import LEASE_NAME
from django_workqueue.models import Job, MaintenanceLease
from testproject.testapp.tasks import add
from tests.support.factories import JobFactory
from tests.support.processes import RunworkerProcess, StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

LEASE = 3.0  # long enough that a busy machine's slow pass does not hand the lease over
ENV = {"WORKQUEUE_MAINTENANCE_LEASE_SECONDS": str(LEASE)}
RAN = "as the fleet's maintainer"  # logged at --verbosity 3 for each service the holder runs
# A non-holder tries the lease when it would run out, plus a jitter of at most LEASE / 20,
# then needs one pass: a second and a half covers that pass on a busy machine.
TAKE_OVER_SLACK = 1.5


def lease() -> MaintenanceLease | None:
    return MaintenanceLease.objects.filter(pk=LEASE_NAME).first()


def holder_among(workers: list[RunworkerProcess]) -> RunworkerProcess | None:
    row = lease()
    return next((w for w in workers if row is not None and w.worker_id == row.owner), None)


def test_one_maintainer_runs_the_fleets_maintenance_and_is_replaced_when_it_dies(
    start_worker: StartWorker,
) -> None:
    workers = [
        start_worker("--concurrency", "1", "--verbosity", "3", name=f"w{n}", env=ENV)
        for n in range(3)
    ]
    for worker in workers:
        worker.wait_started()
    leader = wait_for(lambda: holder_among(workers), alive=workers, message="a maintainer")
    wait_for(lambda: leader.stderr.count(RAN) >= 5, alive=workers, message="maintenance runs")

    others = [w for w in workers if w is not leader]
    assert [w.logged(RAN) for w in others] == [False, False]
    assert holder_among(workers) is leader

    killed_at = driver_for("default").now()
    leader.kill()  # SIGKILL: no release; the others see its session (or pid) end
    successor = wait_for(
        lambda: holder_among(others), alive=others, timeout=30, message="a new maintainer"
    )

    taken_at = lease().acquired_at  # type: ignore[union-attr]
    assert killed_at <= taken_at  # taken over from a dead holder, never shared with a live one
    assert (taken_at - killed_at).total_seconds() <= LEASE + TAKE_OVER_SLACK
    delayed = add.using(delay=0.5).enqueue(2, 3)
    orphan = JobFactory(
        expired=True, lease_owner=leader.worker_id,
        lease_expires_at=killed_at - dt.timedelta(seconds=1),
    )  # fmt: skip
    wait_for(
        lambda: set(Job.objects.filter(pk__in=[delayed.pk, orphan.pk]).values_list("status",
                                                                                   flat=True))
        == {"succeeded"},
        alive=others, timeout=30, message="the delayed job promoted, the orphan reaped, both run",
    )  # fmt: skip
    orphan.refresh_from_db()
    assert orphan.errors[-1]["type"] == "LeaseExpired"

    last = next(w for w in others if w is not successor)
    successor.send(signal.SIGTERM)  # a graceful stop releases the lease at once
    assert successor.wait() == 0
    wait_for(lambda: holder_among([last]), alive=[last], timeout=30, message="the hand-over")
