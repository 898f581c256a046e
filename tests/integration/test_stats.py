"""``stats.snapshot()`` (SQLite and PostgreSQL): equal to what the ORM counts directly, after real
workers ran real jobs; the counters are written with the outcomes, in their transaction."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import Count, Min
from django.test.utils import CaptureQueriesContext

from django_workqueue import stats
from django_workqueue.db import Outcome, OutcomeKind, driver_for
from django_workqueue.models import Job, StatsCounter
from django_workqueue.states import ACTIVE
from django_workqueue.stats import counters
from django_workqueue.workflow import release
from testproject.testapp.tasks import add, send_mail
from tests.support.database import db_now
from tests.support.factories import JobFactory
from tests.support.observability_tasks import discards, fails

pytestmark = pytest.mark.django_db(transaction=True)

ACTIVE_NAMES = sorted(str(s.value) for s in ACTIVE)


def orm_counts(queue: str, task: str | None) -> dict[str, int]:
    rows = Job.objects.filter(queue=queue, status__in=ACTIVE_NAMES)
    if task is not None:
        rows = rows.filter(task_name=task)
    found = dict(rows.order_by().values_list("status").annotate(n=Count("id")))
    return {status: found.get(status, 0) for status in ACTIVE_NAMES}


def orm_finished(queue: str, task: str | None, status: str) -> int:
    rows = Job.objects.filter(queue=queue, status=status)
    return (rows if task is None else rows.filter(task_name=task)).count()


def test_the_snapshot_equals_the_counts_the_orm_makes(drain: Any) -> None:
    for n in range(5):
        add.enqueue(n, n)
    send_mail.enqueue("ada@example.com")
    for _ in range(3):
        discards.enqueue()
    for _ in range(2):
        fails.enqueue()
    drain(concurrency=2)
    assert Job.objects.filter(status="ready").count() == 0
    # Unfinished jobs in every state, some due, some not, in two queues.
    past = db_now() - dt.timedelta(minutes=3)
    JobFactory.create_batch(4, task_name=add.name, status="ready", run_after=past)
    JobFactory.create_batch(2, task_name="other.task", status="ready")
    JobFactory(task_name=add.name, status="ready", queue="reports")
    JobFactory.create_batch(3, task_name=add.name, status="scheduled",
                            run_after=db_now() + dt.timedelta(hours=1))  # fmt: skip
    JobFactory(task_name=add.name, status="held")
    JobFactory.create_batch(2, task_name="other.task", status="blocked", waiting_on=1)
    JobFactory(task_name=add.name, running=True)

    snap = stats.snapshot()

    keys = set(Job.objects.order_by().values_list("queue", "task_name").distinct())
    assert {(s.queue, s.task_name) for s in snap.tasks} == keys
    for stat in (*snap.tasks, *snap.queues):
        queue, task = stat.queue, stat.task_name
        assert stat.counts == orm_counts(queue, task), (queue, task)
        ready = Job.objects.filter(queue=queue, status="ready", run_after__lte=snap.taken_at)
        if task is not None:
            ready = ready.filter(task_name=task)
        assert stat.backlog == ready.count()
        oldest = ready.aggregate(first=Min("run_after"))["first"]
        if oldest is None:
            assert stat.oldest_ready_age is None
        else:
            assert stat.oldest_ready_age == pytest.approx(
                (snap.taken_at - oldest).total_seconds(), abs=1e-3
            )
        for window in stat.windows:
            assert window.succeeded == orm_finished(queue, task, "succeeded")
            assert window.failed == orm_finished(queue, task, "failed")
            assert window.cancelled == orm_finished(queue, task, "cancelled")
            # Each job of ``fails`` failed its first attempt and waits for its second.
            retried = Job.objects.filter(queue=queue, status="scheduled", attempt=1)
            assert (
                window.retried
                == (retried if task is None else retried.filter(task_name=task)).count()
            )
            finished = window.succeeded + window.failed + window.cancelled
            assert window.throughput == pytest.approx(finished / window.seconds)
    default = snap.queue("default")
    assert default is not None and snap.queue("low") is not None  # a queue with nothing yet
    window = default.window(5)
    assert (window.succeeded, window.failed, window.retried) == (5, 3, 2)
    assert window.failure_rate == pytest.approx(5 / 10)
    assert None not in (window.run_p50, window.run_p95, window.wait_p50, window.wait_p95)
    assert snap.task(add.name, "default").oldest_ready_age >= 170  # due three minutes ago


def running_job(**fields: Any) -> Job:
    return JobFactory(running=True, **fields)


def outcome(job: Job, kind: OutcomeKind, **fields: Any) -> Outcome:
    return Outcome(job_id=job.pk, attempt=job.attempt, kind=kind, max_attempts=job.max_attempts,
                   **fields)  # fmt: skip


def counted(name: str, task: str = "t") -> int:
    return sum(
        StatsCounter.objects.filter(task_name=task, name=name).values_list("count", flat=True)
    )


def test_an_attempt_is_counted_iff_its_outcome_is_written() -> None:
    driver = driver_for("default")
    ok, stale, asked = (
        running_job(task_name="t"),
        running_job(task_name="t"),
        running_job(task_name="t", cancel_requested_at=db_now()),
    )
    snoozed = running_job(task_name="t")
    Job.objects.filter(pk=stale.pk).update(lease_owner="worker-b")  # its lease was lost

    release.record(driver, "worker-a", [
        outcome(ok, OutcomeKind.SUCCEEDED, result_json="1"),
        outcome(stale, OutcomeKind.SUCCEEDED, result_json="1"),
        outcome(asked, OutcomeKind.RETRY, error={"type": "E", "message": "m"}),
        outcome(snoozed, OutcomeKind.SNOOZE, delay=60),
    ])  # fmt: skip

    assert counted("succeeded") == 1  # not the stale attempt's
    assert counted("cancelled") == 1  # a requested cancellation turned the failure
    assert counted("retried") == 0 and counted("run") == 2  # a snooze is not an ending


def test_counters_roll_back_with_the_outcomes_they_count() -> None:
    job = running_job(task_name="t")
    with pytest.raises(RuntimeError), transaction.atomic():
        release.record(driver_for("default"), "worker-a",
                       [outcome(job, OutcomeKind.SUCCEEDED, result_json="1")])  # fmt: skip
        raise RuntimeError("the atomic task's body failed after recording")
    assert counted("succeeded") == 0 and Job.objects.get(pk=job.pk).status == "running"


def test_one_batch_costs_one_counter_statement() -> None:
    jobs = [running_job(task_name=f"t{n % 3}") for n in range(30)]
    batch = [outcome(job, OutcomeKind.SUCCEEDED, result_json="1") for job in jobs]
    with CaptureQueriesContext(connection) as captured:
        release.record(driver_for("default"), "worker-a", batch)
    statements = [q["sql"] for q in captured.captured_queries]
    assert sum(StatsCounter._meta.db_table in sql for sql in statements) == 1
    assert sum(counted("succeeded", f"t{n}") for n in range(3)) == 30


def test_counter_rows_older_than_an_hour_are_forgotten() -> None:
    now = db_now()
    for age in (61, 59):
        StatsCounter.objects.create(minute=now - dt.timedelta(minutes=age), queue="default",
                                    task_name="t", name="succeeded", count=1)  # fmt: skip
    assert counters.forget_old("default", now) == 1
    assert StatsCounter.objects.count() == 1


def test_the_reaper_counts_expired_leases_as_retried_or_failed() -> None:
    from django_workqueue.maintenance.reaper import Reaper

    JobFactory(task_name="t", expired=True, lease_owner="worker-a")
    JobFactory(task_name="t", expired=True, lease_owner="worker-b", attempt=3, crashes_charged=2)

    assert Reaper("default", interval=1.0).run_once() == 2

    assert (counted("retried"), counted("failed"), counted("run")) == (1, 1, 2)


# PostgreSQL only by design: two sessions' row locks taken in a forced interleaving.
@pytest.mark.postgres_only
def test_a_reaper_and_a_worker_take_workflow_and_counter_locks_in_one_order():
    """A worker's completion locks its job, the workflow, then the counter rows; the reaper
    ending a job of the same workflow must take them in that order too, or the two deadlock
    when they share counter rows (the same minute, queue, task and shard)."""
    import threading
    import zlib

    from django.db import connections
    from django.utils import timezone

    from django_workqueue import group
    from django_workqueue.maintenance import reaper

    shard = zlib.crc32(b"reaper") % 8
    owner = next(f"w-{n}" for n in range(1000) if zlib.crc32(f"w-{n}".encode()) % 8 == shard)
    workflow = group(add.s(1, 2), add.s(3, 4)).enqueue()
    done, dead = Job.objects.filter(workflow=workflow).order_by("id")
    then = timezone.now() - dt.timedelta(minutes=5)
    Job.objects.filter(pk=done.pk).update(
        status="running", attempt=1, lease_owner=owner, started_at=then, run_after=then,
        lease_expires_at=timezone.now() + dt.timedelta(minutes=5),
    )  # fmt: skip
    Job.objects.filter(pk=dead.pk).update(
        status="running", attempt=3, crashes_charged=2, lease_owner="gone", started_at=then,
        run_after=then, lease_expires_at=timezone.now() - dt.timedelta(seconds=5),
    )  # fmt: skip
    worker_in, reaper_in = threading.Event(), threading.Event()
    original = counters.count

    def interleaved(driver: Any, who: str, outcomes: Any, recorded: Any) -> None:
        # The worker reaches its counters holding the workflow's row; the reaper then runs
        # until it needs a lock the worker holds (or, in the wrong order, its counters).
        if who == owner:
            worker_in.set()
            # Well within the writes' 2 s lock_timeout (db/postgresql.py LOCK_TIMEOUT), which
            # bounds the reaper's wait for the workflow row this transaction holds.
            reaper_in.wait(1)
            original(driver, who, outcomes, recorded)
        else:
            original(driver, who, outcomes, recorded)
            reaper_in.set()

    errors: dict[str, BaseException] = {}

    def run(name: str, call: Any) -> None:
        try:
            call()
        except BaseException as exc:
            errors[name] = exc
        finally:
            connections.close_all()

    def complete() -> None:
        success = Outcome(
            job_id=done.pk, attempt=1, kind=OutcomeKind.SUCCEEDED, max_attempts=3,
            result_json="3", task_name=done.task_name, queue=done.queue,
        )  # fmt: skip
        release.record(driver_for("default"), owner, [success])

    def reap() -> None:
        worker_in.wait(10)
        reaper.run_once()

    counters.count = interleaved  # type: ignore[assignment]
    try:
        threads = [threading.Thread(target=run, args=("worker", complete)),
                   threading.Thread(target=run, args=("reaper", reap))]  # fmt: skip
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    finally:
        counters.count = original  # type: ignore[assignment]

    assert errors == {}
    # The reaper's pass left the job whose workflow row the worker held (db/locking.py: never
    # waited for); the next pass reaps it.
    reaper.run_once()
    assert {job.status for job in Job.objects.filter(workflow=workflow)} == {"succeeded", "failed"}
