"""Locked rows (``db/locking.py``): a row another session holds never charges an attempt, never
drops or holds up an unrelated outcome, never turns a success into a failure; operations wait a
bounded time and say why they gave up.

Every test holds a real lock from another session (a thread with its own connection:
``SELECT … FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite) while a writer runs. Holds
that must outlast a worker's bounded wait (``LOCK_TIMEOUT``, 2 s) are ended on a condition: the
writer has tried the row again ``PAST_THE_WAIT`` times, ``LOCKED_RETRY_SECONDS`` apart.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.models import F, Model

from django_workqueue import task
from django_workqueue.attempt.inprocess import run_claimed
from django_workqueue.attempt.run import run
from django_workqueue.context import JobContext
from django_workqueue.db import ClaimedJob, Outcome, OutcomeKind, driver_for, locking
from django_workqueue.exceptions import RowLocked
from django_workqueue.maintenance import reaper
from django_workqueue.models import Dependency, Job, Signal, Workflow
from django_workqueue.operations import cancel_job, send_signal
from django_workqueue.worker.completer import Completer
from django_workqueue.workflow import release as release_module
from testproject.testapp.models import Effect
from tests.support.database import fresh
from tests.support.factories import JobFactory
from tests.support.tasks import Gate, atomic_gated_effect, gates
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
sqlite_only = pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's one write lock")

OWNER = "worker-a"
# Tries of a held row, LOCKED_RETRY_SECONDS apart, that outlast a worker's bounded lock wait
# (PostgreSQL's LOCK_TIMEOUT of 2 s) with room to spare.
PAST_THE_WAIT = int(3 / locking.LOCKED_RETRY_SECONDS)


# --- holding locks from another session ---------------------------------------------------------


@pytest.fixture
def hold() -> Iterator[Callable[[type[Model], int], threading.Event]]:
    """Lock a row ``FOR UPDATE`` in another session until the returned event is set."""
    threads: list[tuple[threading.Thread, threading.Event]] = []

    def start(model: type[Model], pk: int) -> threading.Event:
        held, release = threading.Event(), threading.Event()

        def run_hold() -> None:
            try:
                with transaction.atomic():
                    list(model.objects.select_for_update().filter(pk=pk))
                    held.set()
                    release.wait(60)
            finally:
                connections.close_all()

        thread = threading.Thread(target=run_hold, daemon=True)
        thread.start()
        assert held.wait(10), "the other session did not get the lock"
        threads.append((thread, release))
        return release

    yield start
    for thread, release in threads:
        release.set()
        thread.join(30)


@pytest.fixture
def hold_database() -> Iterator[Callable[[], threading.Event]]:
    """SQLite: hold the database's write lock (``BEGIN IMMEDIATE``) in another connection
    until the returned event is set; this thread's connection waits 0.2 s for it, not 20."""
    threads: list[tuple[threading.Thread, threading.Event]] = []

    def start() -> threading.Event:
        held, release = threading.Event(), threading.Event()

        def run_hold() -> None:
            try:
                with transaction.atomic():  # BEGIN IMMEDIATE: the write lock, at once
                    held.set()
                    release.wait(60)
            finally:
                connections.close_all()

        thread = threading.Thread(target=run_hold, daemon=True)
        thread.start()
        assert held.wait(10), "the other connection did not get the write lock"
        threads.append((thread, release))
        return release

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout = 200")
    yield start
    for thread, release in threads:
        release.set()
        thread.join(30)
    connection.close()  # the next test's connection gets the configured busy timeout back


@pytest.fixture
def tries(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], Callable[[], int]]:
    """``tries(job_id)()``: how many outcome writes (``release.record``) included the job."""
    counts: dict[int, int] = {}
    record = release_module.record

    def counting(driver: Any, owner: str, outcomes: Any, **kwargs: Any) -> Any:
        for outcome in outcomes:
            counts[outcome.job_id] = counts.get(outcome.job_id, 0) + 1
        return record(driver, owner, outcomes, **kwargs)

    monkeypatch.setattr(release_module, "record", counting)
    return lambda job_id: lambda: counts.get(job_id, 0)


def in_thread(target: Callable[[], Any]) -> threading.Thread:
    def run_it() -> None:
        try:
            target()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run_it, daemon=True)
    thread.start()
    return thread


def claim_as(owner: str, job: Job) -> ClaimedJob:
    claimed = driver_for("default").claim_job(job.pk, owner)
    assert claimed is not None
    return claimed


def claimed_context(job: Job) -> JobContext:
    claimed = claim_as(OWNER, job)
    return JobContext(claimed, owner=OWNER, driver=driver_for("default"))


def success(context: JobContext) -> Outcome:
    return Outcome(
        job_id=context.job_id, attempt=context.attempt, kind=OutcomeKind.SUCCEEDED,
        max_attempts=context.job.max_attempts, result_json="1",
    )  # fmt: skip


def step_of(workflow: Workflow, **fields: Any) -> Job:
    Workflow.objects.filter(pk=workflow.pk).update(total=F("total") + 1, open=F("open") + 1)
    return JobFactory(workflow=workflow, **fields)


def blocked_on(prerequisite: Job, workflow: Workflow) -> Job:
    dependent = step_of(workflow, status="blocked", waiting_on=1)
    Dependency.objects.create(job=dependent, prerequisite=prerequisite, position=0)
    return dependent


# --- atomic=True ----------------------------------------------------------------------------------


@pytest.mark.postgres_only  # row locks; SQLite's atomic body holds the write lock from its start
def test_an_atomic_success_outwaits_a_held_job_row_uncharged_and_its_body_runs_once(
    hold: Any, tries: Any
) -> None:
    job = atomic_gated_effect.enqueue(value="paid")
    gate = gates[job.pk] = Gate()
    claimed = claim_as(OWNER, job)
    driver = driver_for("default")
    context = JobContext(claimed, owner=OWNER, driver=driver)
    ended: list[Any] = []
    attempt = in_thread(lambda: ended.append(run(claimed, context, driver, None)))
    try:
        assert gate.reached.wait(10)  # the body wrote its effect, uncommitted
        release = hold(Job, job.pk)
        gate.released.set()
        wait_until(lambda: tries(job.pk)() >= PAST_THE_WAIT, timeout=20,
                   message="the success written again while the job's row is held")  # fmt: skip
        release.set()
    finally:
        gate.released.set()
        attempt.join(30)
        gates.pop(job.pk, None)
    job = fresh(job)
    assert (job.status, job.attempt, job.errors) == ("succeeded", 1, [])
    assert list(Effect.objects.filter(job_id=job.pk).values_list("attempt", "value")) == [
        (1, "paid")
    ]
    assert ended[0][1] is False  # written in the body's transaction, nothing left to write


@sqlite_only  # the held write lock: on PostgreSQL a transaction begins at once
def test_an_atomic_job_whose_transaction_cannot_begin_is_given_back_uncharged(
    hold_database: Any, caplog: pytest.LogCaptureFixture
) -> None:
    job = atomic_gated_effect.enqueue(value="later")
    claimed = claim_as(OWNER, job)
    budget = Job.objects.get(pk=job.pk).max_attempts
    release = hold_database()
    # The body's transaction cannot begin (the write lock is held past the busy timeout): the
    # attempt is given back, and its release waits in place for the lock, then is written.
    done = threading.Event()

    def attempt_it() -> None:
        with connections["default"].cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout = 200")
        run_claimed(driver_for("default"), claimed, OWNER, heartbeat=False)
        done.set()

    running = in_thread(attempt_it)
    waiting = lambda: any("trying again" in r.getMessage() for r in caplog.records)  # noqa: E731
    wait_until(waiting, timeout=20,
               message="the release waiting for the write lock")  # fmt: skip
    release.set()
    running.join(30)
    assert done.is_set()
    job = fresh(job)
    assert (job.status, job.errors) == ("ready", [])  # no failure recorded: nothing charged
    # The claim is counted, no budget spent, max_attempts untouched (budgets.py).
    assert (job.attempt, job.attempts_charged, job.crashes_charged) == (1, 0, 0)
    assert job.max_attempts == budget
    assert not Effect.objects.filter(job_id=job.pk).exists()  # the body never ran


# --- skip-queue -----------------------------------------------------------------------------------

_arrived, _go = threading.Event(), threading.Event()


@task(max_attempts=3)
def waits_for_the_test(context: Any) -> str:
    _arrived.set()
    assert _go.wait(20), "the test never let the body return"
    return "done"


@pytest.mark.postgres_only  # row locks
def test_a_skip_queue_success_outwaits_a_held_job_row_and_is_written(hold: Any, tries: Any) -> None:
    job = skip_queue_while_held(lambda job_id: hold(Job, job_id), tries, PAST_THE_WAIT)
    assert (job.status, job.attempt, job.errors, job.result) == ("succeeded", 1, [], "done")


@sqlite_only  # the held write lock
def test_a_skip_queue_success_outwaits_a_held_write_lock_and_is_written(
    hold_database: Any, tries: Any
) -> None:
    job = skip_queue_while_held(lambda job_id: hold_database(), tries, 3)
    assert (job.status, job.attempt, job.errors, job.result) == ("succeeded", 1, [], "done")


def skip_queue_while_held(
    start_hold: Callable[[int], threading.Event], tries: Any, enough: int
) -> Job:
    """Enqueue ``waits_for_the_test`` with skip-queue in another thread; once its body runs,
    hold its row (``start_hold``), let the body return, and end the hold after the outcome was
    written ``enough`` times. Returns the job as it is after the enqueue returned."""
    _arrived.clear()
    _go.clear()

    def enqueue() -> None:
        if connection.vendor == "sqlite":  # this thread waits 0.2 s for the write lock, not 20
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA busy_timeout = 200")
        waits_for_the_test.using(skip_queue=True).enqueue()

    enqueuing = in_thread(enqueue)
    try:
        assert _arrived.wait(10)  # the attempt runs in the enqueuing thread
        job = Job.objects.get(task_name=waits_for_the_test.name)
        release = start_hold(job.pk)
        _go.set()
        wait_until(lambda: tries(job.pk)() >= enough, timeout=20,
                   message="the outcome written again while the row is held")  # fmt: skip
        assert fresh(job).status == "running"  # meanwhile
        release.set()
    finally:
        _go.set()
        enqueuing.join(30)
    assert not enqueuing.is_alive()
    return fresh(job)


# --- the completer --------------------------------------------------------------------------------


@pytest.mark.postgres_only  # row locks; SQLite's writers wait for the one write lock
@pytest.mark.parametrize("held", ["workflow", "dependent"])
def test_a_held_row_keeps_only_its_own_outcome_and_the_batch_is_written(
    hold: Any, held: str
) -> None:
    workflow = Workflow.objects.create()
    step = claimed_context(step_of(workflow))
    dependent = blocked_on(Job.objects.get(pk=step.job_id), workflow)
    plain = claimed_context(JobFactory())
    completer = Completer(driver_for("default"), OWNER)
    # A view's long transaction that ended another step (complete_job) holds the workflow's
    # row; a session editing the dependent holds that one (met after the bounded wait).
    release = hold(Workflow, workflow.pk) if held == "workflow" else hold(Job, dependent.pk)
    completer.hand_over(success(step))
    completer.hand_over(success(plain))

    _, written = completer.write_outcomes()  # raises nothing

    assert written == {(plain.job_id, plain.attempt)}
    assert Job.objects.get(pk=plain.job_id).status == "succeeded"
    kept = (completer.pending, Job.objects.get(pk=step.job_id).status)
    assert kept == (1, "running")  # kept for a later pass, not lost
    # The worker's control loop sleeps no longer than that before it tries the row again.
    assert completer.outcomes_due_at() <= time.monotonic() + locking.LOCKED_RETRY_SECONDS
    release.set()
    wait_until(lambda: completer.write_outcomes()[1], timeout=20, message="the held outcome")
    step_job = Job.objects.get(pk=step.job_id)
    assert (step_job.status, step_job.attempt, step_job.errors) == ("succeeded", 1, [])
    assert fresh(dependent).status == "ready"
    assert Workflow.objects.filter(pk=workflow.pk, succeeded=1, open=1).exists()


@sqlite_only  # the whole database locked: every outcome waits, none is lost
def test_a_held_write_lock_keeps_every_outcome_uncharged_for_the_next_pass(
    hold_database: Any,
) -> None:
    jobs = [claimed_context(JobFactory()) for _ in range(2)]
    completer = Completer(driver_for("default"), OWNER)
    release = hold_database()
    for context in jobs:
        completer.hand_over(success(context))
    with pytest.raises(Exception) as caught:
        completer.write_outcomes()
    assert locking.is_locked(driver_for("default"), caught.value)  # not a lost connection
    assert completer.pending == 2
    release.set()
    _, written = completer.write_outcomes()
    assert written == {(c.job_id, c.attempt) for c in jobs}
    assert [(j.status, j.attempt, j.errors) for j in Job.objects.order_by("id")] == [
        ("succeeded", 1, [])
    ] * 2


# --- the reaper -----------------------------------------------------------------------------------


@pytest.mark.postgres_only  # row locks; SQLite's reaper holds the write lock for its pass
def test_a_reaper_pass_reaps_the_other_jobs_while_rows_are_held(hold: Any) -> None:
    # The crash budget spent but one (budgets.py): reaping ends it, which writes its workflow.
    past = {"attempt": 3, "max_attempts": 3, "crashes_charged": 2}
    held_workflow = Workflow.objects.create()
    in_held_workflow = step_of(held_workflow, expired=True, **past)
    other_workflow = Workflow.objects.create()
    with_held_dependent = step_of(other_workflow, expired=True, **past)
    dependent = blocked_on(with_held_dependent, other_workflow)
    plain = JobFactory(expired=True)
    releases = [hold(Workflow, held_workflow.pk), hold(Job, dependent.pk)]

    assert reaper.run_once() == 1  # raises nothing

    assert fresh(plain).status == "ready"
    assert {fresh(in_held_workflow).status, fresh(with_held_dependent).status} == {"running"}
    for release in releases:
        release.set()

    def both_reaped() -> bool:
        reaper.run_once()
        return {fresh(in_held_workflow).status, fresh(with_held_dependent).status} == {"failed"}

    wait_until(both_reaped, timeout=20, message="later passes")
    assert fresh(dependent).status == "cancelled"  # its prerequisite failed


# --- operations -----------------------------------------------------------------------------------


@pytest.mark.postgres_only  # row locks
def test_an_operation_on_a_held_row_gives_up_after_its_bound_and_says_why(
    hold: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(locking, "OPERATION_LOCK_WAIT", 0.5)
    job = JobFactory()
    release = hold(Job, job.pk)
    with pytest.raises(RowLocked, match=r"cancel_job\(\d+\).*held by another database session"):
        cancel_job(job)
    assert fresh(job).status == "ready"  # nothing changed
    release.set()
    assert cancel_job(job).action == "cancelled"


@pytest.mark.postgres_only  # row locks
def test_a_signal_to_a_held_job_row_gives_up_after_the_operations_bound(
    hold: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """send_signal is an operation like the others: it waits for a held row only so long."""
    monkeypatch.setattr(locking, "OPERATION_LOCK_WAIT", 0.5)
    job = JobFactory()
    release = hold(Job, job.pk)
    with pytest.raises(RowLocked, match=r"send_signal\(job \d+, 'approve'\).*held by another"):
        send_signal(job, "approve", {"by": "alice"})
    assert not Signal.objects.filter(job=job).exists()  # nothing kept
    release.set()
    assert send_signal(job, "approve", {"by": "alice"}).action == "signalled"


@sqlite_only  # the held write lock
def test_an_operation_on_a_locked_database_gives_up_and_says_why(hold_database: Any) -> None:
    job = JobFactory()
    release = hold_database()
    with pytest.raises(RowLocked, match="commit or roll back"):
        cancel_job(job)
    release.set()
    assert cancel_job(job).action == "cancelled"


@pytest.mark.postgres_only  # row locks
def test_an_operation_inside_a_transaction_leaves_its_lock_wait_as_it_found_it() -> None:
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '7s'")
        cancel_job(JobFactory())
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            assert cursor.fetchone()[0] == "7s"


# --- the release at shutdown ----------------------------------------------------------------------


@pytest.mark.postgres_only  # row locks; SQLite's release waits for the one write lock
def test_a_release_at_shutdown_gives_back_the_other_jobs_and_the_held_one_once_free(
    hold: Any, tries: Any
) -> None:
    from django_workqueue.attempt.lease import RunningJob
    from django_workqueue.worker.runner import Worker

    worker = Worker(concurrency=2)
    held, free = JobFactory(), JobFactory()
    for job in (held, free):
        claimed = claim_as(worker.id, job)
        worker._running[job.pk] = RunningJob(
            JobContext(claimed, owner=worker.id, driver=worker.driver)
        )
    release = hold(Job, held.pk)
    releasing = in_thread(lambda: worker.shutdown_sequence().release_remaining())
    wait_until(lambda: tries(held.pk)() >= 2, timeout=20, message="the held job tried again")
    assert fresh(free).status == "ready"  # given back at once, not held up by the other
    assert fresh(held).status == "running"
    release.set()
    releasing.join(30)
    for job in (held, free):
        job = fresh(job)
        assert (job.status, job.errors, job.lease_owner) == ("ready", [], None)
