"""``atomic=True`` tasks: the body's writes commit iff this worker records the job as succeeded.

The fencing tests drive one attempt by hand: claim with the driver as a known owner, take the
lease away as another worker or the reaper would, then run the job (``execution.run``) as the
stale worker.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connections

from django_workqueue.attempt.run import run
from django_workqueue.context import JobContext
from django_workqueue.db import ClaimedJob, driver_for
from django_workqueue.maintenance import reaper
from django_workqueue.models import Job
from testproject.testapp.models import Effect
from testproject.testapp.tasks import add, atomic_effect
from tests.support.database import fresh, row_snapshot
from tests.support.settings import workqueue_settings
from tests.support.tasks import Gate, atomic_gated_effect, gates

pytestmark = pytest.mark.django_db(transaction=True)


def effects_of(job: Job | int) -> list[tuple[int, str]]:
    job_id = job.pk if isinstance(job, Job) else job
    return list(Effect.objects.filter(job_id=job_id).values_list("attempt", "value"))


def claim_as(owner: str) -> ClaimedJob:
    [claimed] = driver_for("default").claim(["default"], 1, owner)
    return claimed


def run_as(owner: str, claimed: ClaimedJob):
    driver = driver_for("default")
    context = JobContext(claimed, owner=owner, driver=driver)
    outcome, pending = run(claimed, context, driver, None)
    if pending:  # not atomic: the worker's completer would write it; write it here
        assert outcome is not None
        return outcome if driver.record(owner, outcome) else None
    return outcome  # atomic: recorded in its own transaction, or None (rolled back)


def test_success_writes_the_effect_exactly_once(drain):
    job = atomic_effect.enqueue(value="paid")

    drain()

    job = fresh(job)
    assert (job.status, job.result, job.attempt) == ("succeeded", "paid", 1)
    assert effects_of(job) == [(1, "paid")]


@workqueue_settings(RETRY_BACKOFF_BASE=0)
def test_a_raising_body_leaves_no_effect_from_any_attempt(drain):
    job = atomic_effect.enqueue(value="doomed", fail=True)
    ok = atomic_effect.enqueue(value="fine")

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("failed", 3)
    assert [(e["attempt"], e["type"], e["message"]) for e in job.errors] == [
        (n, "builtins.RuntimeError", "rolled back") for n in (1, 2, 3)
    ]
    assert effects_of(job) == []
    assert effects_of(ok) == [(1, "fine")]


def test_completion_by_the_lease_owner_commits(drain):
    # The control for the fencing tests below: the same hand-driven path, lease intact.
    job = atomic_effect.enqueue(value="mine")
    claimed = claim_as("owner-x")

    outcome = run_as("owner-x", claimed)

    assert outcome is not None and outcome.kind == "succeeded"
    job = fresh(job)
    assert (job.status, job.result, job.lease_owner) == ("succeeded", "mine", None)
    assert effects_of(job) == [(1, "mine")]


def _reaped(job: Job) -> None:
    Job.objects.filter(pk=job.pk).update(lease_expires_at="2000-01-01T00:00:00Z")
    assert reaper.run_once() == 1


def _reaped_and_claimed_by_another(job: Job) -> None:
    _reaped(job)
    assert claim_as("owner-y").attempt == 2


def _owner_changed(job: Job) -> None:
    Job.objects.filter(pk=job.pk).update(lease_owner="owner-y")


@pytest.mark.parametrize(
    "take_lease",
    [_reaped, _reaped_and_claimed_by_another, _owner_changed],
    ids=lambda f: f.__name__,
)
def test_a_stale_worker_cannot_commit_its_effect(take_lease):
    job = atomic_effect.enqueue(value="stale")
    claimed = claim_as("owner-x")
    take_lease(job)
    before = row_snapshot(job.pk)

    outcome = run_as("owner-x", claimed)  # the body runs and writes its Effect, then is fenced

    assert outcome is None
    assert effects_of(job) == []
    assert row_snapshot(job.pk) == before


def test_a_stale_worker_cannot_record_a_plain_task_either():
    job = add.enqueue(1, 2)
    claimed = claim_as("owner-x")
    _reaped_and_claimed_by_another(job)
    before = row_snapshot(job.pk)

    assert run_as("owner-x", claimed) is None
    assert row_snapshot(job.pk) == before
    assert (before["status"], before["lease_owner"], before["result"]) == (
        "running",
        "owner-y",
        None,
    )


# PostgreSQL only: on SQLite the atomic body's transaction holds the database's one write lock
# from its first statement (BEGIN IMMEDIATE), so no reaper or other worker can take the lease
# while the body runs; they wait for it to commit. That case is covered above, before the body.
@pytest.mark.postgres_only
@pytest.mark.parametrize("take_lease", [_reaped, _owner_changed], ids=lambda f: f.__name__)
def test_lease_lost_while_the_body_runs_rolls_the_effect_back(take_lease):
    job = atomic_gated_effect.enqueue(value="late")
    claimed = claim_as("owner-x")
    gate = gates[job.pk] = Gate()
    outcomes = []

    def stale_worker() -> None:
        try:
            outcomes.append(run_as("owner-x", claimed))
        finally:
            connections.close_all()

    thread = threading.Thread(target=stale_worker)
    thread.start()
    try:
        assert gate.reached.wait(20), "the body did not start"
        # The Effect is written but not committed; the lease goes away under the body.
        take_lease(job)
        before = row_snapshot(job.pk)
    finally:
        gate.released.set()
        thread.join(20)
        gates.pop(job.pk, None)

    assert outcomes == [None]
    assert effects_of(job) == []
    assert row_snapshot(job.pk) == before
