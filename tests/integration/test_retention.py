"""Retention (``maintenance/retention.py``) on SQLite and PostgreSQL: exactly the rows past their
status's age go, in batches of at most 1,000 jobs, workflows only whole and finished, and
prerequisites only after their dependents. The clock is the ``now`` each call is given."""

from __future__ import annotations

import datetime as dt
import math
import os
import threading
import time

import pytest
from django.db import connection

from django_workqueue.maintenance import retention
from django_workqueue.maintenance.retention import Policy, Purged, Retention, pending, purge
from django_workqueue.models import Dependency, Job, Workflow
from django_workqueue.states import Status
from tests.support.factories import JobFactory
from tests.support.pgbouncer import ADMIN_ENV
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


def days_ago(days: float) -> dt.datetime:
    return NOW - dt.timedelta(days=days)


def finished(status: str, age_days: float, **fields) -> Job:
    return JobFactory(status=status, finished_at=days_ago(age_days), **fields)


def workflow(status: str = "succeeded", age_days: float | None = 40) -> Workflow:
    return Workflow.objects.create(
        status=status, finished_at=None if age_days is None else days_ago(age_days)
    )


def edge(job: Job, prerequisite: Job, position: int = 0) -> Dependency:
    return Dependency.objects.create(job=job, prerequisite=prerequisite, position=position)


def remaining(*jobs: Job) -> list[Job]:
    left = set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", flat=True))
    return [job for job in jobs if job.pk in left]


def test_purge_deletes_the_jobs_past_their_statuses_age_and_keeps_the_rest():
    old_ok, young_ok = finished("succeeded", 8), finished("succeeded", 6)
    old_failed, young_failed = finished("failed", 31), finished("failed", 29)
    old_cancelled, young_cancelled = finished("cancelled", 8), finished("cancelled", 6)
    waiting = JobFactory(status=Status.READY, enqueued_at=days_ago(100))
    running = JobFactory(running=True, enqueued_at=days_ago(100))

    result = purge(now=NOW)  # the defaults: succeeded 7, failed 30, cancelled 7 days

    assert result == Purged(jobs={"succeeded": 1, "failed": 1, "cancelled": 1}, workflows=0)
    everything = [old_ok, young_ok, old_failed, young_failed, old_cancelled, young_cancelled]
    assert remaining(*everything, waiting, running) == [
        young_ok,
        young_failed,
        young_cancelled,
        waiting,
        running,
    ]


def test_a_status_whose_retention_is_none_is_kept_forever():
    ok, failed = finished("succeeded", 400), finished("failed", 400)

    with workqueue_settings(RETENTION={"failed": None}):
        result = purge(now=NOW)

    assert result.jobs == {"succeeded": 1, "failed": 0, "cancelled": 0}
    assert remaining(ok, failed) == [failed]


def test_retention_that_keeps_everything_deletes_nothing():
    old = finished("succeeded", 400)
    keep_all = {"succeeded": None, "failed": None, "cancelled": None}

    with workqueue_settings(RETENTION=keep_all):
        assert retention.run_once(now=NOW) == 0
        assert pending(now=NOW).total == 0

    assert remaining(old) == [old]


def test_purge_deletes_at_most_a_thousand_jobs_per_transaction():
    Job.objects.bulk_create(
        Job(task_name="t", status=Status.SUCCEEDED, finished_at=days_ago(10 + n % 7))
        for n in range(2_500)
    )
    left_after_each_batch: list[int] = []

    result = purge(now=NOW, on_batch=lambda n: left_after_each_batch.append(Job.objects.count()))

    assert left_after_each_batch == [1500, 500, 0]
    assert result.total == 2_500


def test_the_oldest_finished_jobs_go_first(monkeypatch):
    ages = [20, 9, 15, 30, 11]
    jobs = [finished("succeeded", age) for age in ages]
    deleted_order: list[int] = []
    original = retention._delete_jobs

    def spy(selection):
        deleted_order.extend(selection.order_by("finished_at").values_list("pk", flat=True))
        return original(selection)

    monkeypatch.setattr(retention, "_delete_jobs", spy)
    purge(now=NOW)

    assert deleted_order == [jobs[i].pk for i in (3, 0, 2, 4, 1)]


def test_a_prerequisite_outside_workflows_stays_while_a_job_depends_on_it():
    prerequisite = finished("succeeded", 40)
    dependent = finished("failed", 10)  # kept 30 days: it may be redriven and read its input
    edge(dependent, prerequisite)

    assert purge(now=NOW).total == 0
    assert remaining(prerequisite, dependent) == [prerequisite, dependent]

    later = NOW + dt.timedelta(days=21)
    assert purge(now=later).jobs == {"succeeded": 1, "failed": 1, "cancelled": 0}
    assert not Dependency.objects.exists()


def test_no_job_of_an_unfinished_workflow_is_deleted():
    run = workflow(status="running", age_days=None)
    done = finished("succeeded", 100, workflow=run)
    step = JobFactory(status=Status.BLOCKED, workflow=run, waiting_on=1)
    edge(step, done)

    assert purge(now=NOW) == Purged(jobs={"succeeded": 0, "failed": 0, "cancelled": 0}, workflows=0)
    assert remaining(done, step) == [done, step]
    assert Dependency.objects.count() == 1


def test_a_finished_workflow_goes_whole_once_every_job_of_it_is_past_its_age():
    flow = workflow(status="failed", age_days=10)
    first = finished("succeeded", 12, workflow=flow)
    second = finished("failed", 10, workflow=flow)
    edge(second, first)

    # The succeeded step is past 7 days, but the failed one is kept 30: the workflow stays whole.
    assert purge(now=NOW).total == 0
    assert remaining(first, second) == [first, second]

    result = purge(now=NOW + dt.timedelta(days=21))

    assert result == Purged(jobs={"succeeded": 1, "failed": 1, "cancelled": 0}, workflows=1)
    assert not Workflow.objects.exists() and not Dependency.objects.exists()


def test_a_workflow_whose_job_another_job_depends_on_stays():
    flow = workflow(status="succeeded", age_days=40)
    step = finished("succeeded", 40, workflow=flow)
    outside = JobFactory(status=Status.BLOCKED, waiting_on=1)  # using(depends_on=[step])
    edge(outside, step)

    assert purge(now=NOW).total == 0
    assert Workflow.objects.filter(pk=flow.pk).exists() and remaining(step) == [step]


def test_a_workflow_with_more_jobs_than_a_batch_is_deleted_over_several_transactions():
    flow = workflow(status="succeeded", age_days=40)
    Job.objects.bulk_create(
        Job(task_name="t", status=Status.SUCCEEDED, finished_at=days_ago(41), workflow=flow)
        for _ in range(1_200)
    )
    batches: list[int] = []

    result = purge(now=NOW, on_batch=batches.append)

    assert batches == [1000, 200]
    assert result == Purged(jobs={"succeeded": 1_200, "failed": 0, "cancelled": 0}, workflows=1)
    assert not Workflow.objects.exists()


def test_pending_counts_what_purge_deletes():
    finished("succeeded", 8), finished("failed", 31), finished("failed", 3)
    flow = workflow(status="cancelled", age_days=9)
    finished("cancelled", 9, workflow=flow), finished("succeeded", 10, workflow=flow)

    counted = pending(now=NOW)

    assert counted == Purged(jobs={"succeeded": 2, "failed": 1, "cancelled": 1}, workflows=1)
    assert purge(now=NOW) == counted


def test_an_explicit_policy_overrides_the_settings():
    ok, failed = finished("succeeded", 2), finished("failed", 2)

    purge(now=NOW, policy=Policy.from_days({"succeeded": 1}))

    assert remaining(ok, failed) == [failed]


def test_only_the_worker_holding_the_lease_purges():
    first_old, second_old = finished("succeeded", 8), finished("succeeded", 9)
    a = Retention("default", interval=60, owner="worker-a")
    b = Retention("default", interval=60, owner="worker-b")

    assert a.run_once(now=NOW) == 2
    assert remaining(first_old, second_old) == []
    late = finished("succeeded", 8)
    assert b.run_once(now=NOW + dt.timedelta(seconds=60)) == 0  # a holds it for 180 s
    assert remaining(late) == [late]

    # a stopped renewing: b takes over once the lease has expired
    assert b.run_once(now=NOW + dt.timedelta(seconds=181)) == 1
    assert remaining(late) == []


@pytest.mark.postgres_only
def test_the_batch_query_walks_the_status_finished_at_index():
    """On PostgreSQL, where the planner's choice on a realistic table is what is checked."""
    Job.objects.bulk_create(
        Job(task_name="t", status=Status.SUCCEEDED, finished_at=days_ago(1 if n % 100 else 9))
        for n in range(20_000)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")
    candidates = retention._standalone("default", "succeeded", days_ago(7))

    plan = candidates.order_by("finished_at").values_list("pk", flat=True)[:1000].explain()

    assert "wq_job_status_finished" in plan, plan


def test_a_workers_run_stops_after_its_batches_and_comes_back_soon_for_the_rest(monkeypatch):
    monkeypatch.setattr(retention, "BATCH_SIZE", 10)
    Job.objects.bulk_create(
        Job(task_name="t", status=Status.SUCCEEDED, finished_at=days_ago(8)) for _ in range(150)
    )
    service = Retention("default", interval=60)
    service.next_run = float("inf")

    assert service.run_once(now=NOW) == 10 * retention.BATCHES_PER_RUN
    assert service.next_run <= time.monotonic() + retention.BACKLOG_PAUSE  # the backlog goes on
    assert service.run_once(now=NOW) == 50
    assert not Job.objects.exists()


def test_purge_reports_when_it_stopped_at_its_batch_limit():
    Job.objects.bulk_create(
        Job(task_name="t", status=Status.SUCCEEDED, finished_at=days_ago(8)) for _ in range(1_001)
    )

    first = purge(now=NOW, max_batches=1)

    assert (first.total, first.more) == (1000, True)
    assert (purge(now=NOW, max_batches=1).total, Job.objects.exists()) == (1, False)


def test_purge_stops_before_the_next_batch_once_asked():
    Job.objects.bulk_create(
        Job(task_name="t", status=Status.SUCCEEDED, finished_at=days_ago(8)) for _ in range(1_001)
    )
    batches = []

    stopped = purge(now=NOW, on_batch=batches.append, stopping=lambda: bool(batches))

    assert (batches, stopped.total, stopped.more) == ([1000], 1000, True)
    assert Job.objects.count() == 1


class BlockedPurge:
    """Stands in for ``purge``: a batch that lasts until ``release`` is set or the run is asked
    to stop (what it saw is kept)."""

    def __init__(self) -> None:
        self.deleting, self.release = threading.Event(), threading.Event()
        self.threads: list[str] = []
        self.names: list[str] = []
        self.saw_stop = False

    def __call__(self, **kwargs) -> Purged:
        from django.db import connections

        self.threads.append(threading.current_thread().name)
        if connection.vendor == "postgresql":  # its session is named after the worker
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_setting('application_name')")
                self.names.append(cursor.fetchone()[0])
        self.deleting.set()
        deadline = time.monotonic() + 30
        while not self.release.wait(0.01) and time.monotonic() < deadline:
            if kwargs["stopping"]():
                self.saw_stop = True
                break
        connections.close_all()
        return Purged(jobs={}, workflows=0, more=True)


@pytest.mark.postgres_only  # SQLite, one writer at a time, runs it inline (the next test)
@pytest.mark.django_db(transaction=True)
def test_the_maintainers_retention_runs_beside_the_workers_claims(background_worker, monkeypatch):
    """A run of retention (seconds of bulk deletes at a churning fleet's rates) runs on a thread
    of its own: the worker that maintains goes on claiming and finishing jobs meanwhile, and
    stopping the worker stops the run after its batch under way."""
    from testproject.testapp.tasks import add

    blocked = BlockedPurge()
    monkeypatch.setattr(retention, "purge", blocked)
    worker = background_worker(concurrency=2)
    wait_until(lambda: worker.maintainer.leading, message="the lone worker to maintain")
    worker.maintainer.retention.next_run = 0.0  # due now
    worker.wake.set()
    assert blocked.deleting.wait(10), "retention did not start"

    jobs = [add.enqueue(n, 1) for n in range(5)]
    try:
        wait_until(
            lambda: (
                Job.objects.filter(pk__in=[j.pk for j in jobs], status="succeeded").count()
                == len(jobs)
            ),
            timeout=15,
            message="the worker to finish jobs while retention deletes",
        )
        assert worker.maintainer.retention.running
        worker.stop()  # asks the run to stop; the worker's drain waits for it
        wait_until(lambda: not worker.maintainer.retention.running, message="retention to stop")
    finally:
        blocked.release.set()
    assert (blocked.threads, blocked.saw_stop) == (["workqueue-retention"], True)
    if not os.environ.get(ADMIN_ENV):  # behind PgBouncer a worker names no session
        assert blocked.names == [worker.session_name]


@pytest.mark.django_db(transaction=True)
def test_on_sqlite_the_maintainer_runs_retention_between_its_passes():
    """SQLite admits one writer at a time: a thread of retention's own would only queue the
    control thread's writes behind its batches, so the maintainer runs it inline."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's one writer (PostgreSQL: the test above)")
    from django_workqueue.maintenance.maintainer import Maintainer

    old = JobFactory(status="succeeded", finished_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    maintainer = Maintainer("default", "a", listening=lambda: False)
    maintainer.run_if_due()  # takes the lease
    maintainer.retention.next_run = 0.0

    maintainer.run_if_due()

    assert not maintainer.retention.running and not Job.objects.filter(pk=old.pk).exists()
    maintainer.release()


@pytest.mark.django_db(transaction=True)
def test_a_background_run_is_never_due_again_until_it_ends_then_wakes_its_caller(monkeypatch):
    """While a run is under way its planned time may pass (a long run): the service must not
    look due, or a caller that sleeps until its next duty would never sleep."""
    blocked = BlockedPurge()
    monkeypatch.setattr(retention, "purge", blocked)
    woken = threading.Event()
    service = Retention("default", interval=0.01)
    service.start(time.monotonic(), more=woken.set)
    assert blocked.deleting.wait(10)
    time.sleep(0.05)  # past the planned next run (interval 0.01 s)

    assert (service.next_run, service.due(time.monotonic() + 3600)) == (math.inf, False)
    blocked.release.set()
    assert woken.wait(10) and service.join(10)
    assert service.next_run <= time.monotonic() + retention.BACKLOG_PAUSE  # more=True: soon


@pytest.mark.django_db(transaction=True)
def test_a_background_run_stops_after_its_batch_once_its_worker_no_longer_leads(monkeypatch):
    blocked = BlockedPurge()
    monkeypatch.setattr(retention, "purge", blocked)
    leads = [True]
    service = Retention("default", interval=60)
    service.start(time.monotonic(), leading=lambda: leads[0])
    assert blocked.deleting.wait(10)

    leads[0] = False

    assert service.join(10) and blocked.saw_stop
    assert service.next_run > time.monotonic() + 30  # no backlog run soon: another leads
