"""Batch tasks: jobs claimed together and run as one call (SQLite and PostgreSQL).

The gate (``batch_size`` ready, or ``batch_wait`` passed since the oldest became due) is tested
through ``claim_batches`` with the clock passed in; running batches through in-process workers.
"""

from __future__ import annotations

import datetime as dt
import math

import pytest

from django_workqueue import chain, operations
from django_workqueue.db import driver_for
from django_workqueue.flow.batches import claim_batches
from django_workqueue.models import Job
from django_workqueue.worker.runner import Worker
from testproject.testapp import tasks
from testproject.testapp.tasks import (
    add,
    batch_discards,
    batch_double,
    batch_echo,
    batch_echo_async,
    batch_echo_soon,
    batch_fails,
    batch_gated,
    batch_wrong_count,
)
from tests.support.database import db_now, fresh
from tests.support.plans import captured_statements, explain, reads
from tests.support.settings import workqueue_settings
from tests.support.waiting import join_slots, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def claim(slots: int = 1, now: dt.datetime | None = None, queues=("default",)):
    return claim_batches(driver_for("default"), list(queues), slots, "batcher", now=now)


def ids(jobs) -> list[int]:
    return [job.id for job in jobs]


def echo_batch(job: Job) -> list:
    """The items of the call a job of ``batch_echo*`` ran in, in call order."""
    return fresh(job).result["batch"]


# --- claiming -----------------------------------------------------------------------------------


def test_a_full_batch_is_claimed_at_once_and_leased_like_any_claim():
    jobs = [batch_echo.enqueue(n) for n in range(3)]  # batch_size=3, batch_wait=60

    found = claim()

    ((task, batch),) = found.batches
    assert task is batch_echo
    assert ids(batch) == [job.pk for job in jobs]
    for job in jobs:
        row = fresh(job)
        assert (row.status, row.attempt, row.lease_owner) == ("running", 1, "batcher")
        assert row.started_at is not None and row.lease_expires_at > row.started_at


def test_a_partial_batch_waits_batch_wait_from_when_its_oldest_job_became_due():
    first = batch_echo.enqueue("a")
    batch_echo.enqueue("b")
    became_due = fresh(first).run_after

    early = claim(now=became_due + dt.timedelta(seconds=59))
    assert early.batches == []
    assert early.due_in == pytest.approx(1.0, abs=0.01)
    assert set(Job.objects.values_list("status", flat=True)) == {"ready"}

    late = claim(now=became_due + dt.timedelta(seconds=60))
    ((_, batch),) = late.batches
    assert [job.args for job in batch] == [["a"], ["b"]]


def test_an_empty_group_has_no_due_time():
    found = claim(now=db_now())
    assert (found.batches, found.due_in) == ([], None)


def test_a_full_backlog_gives_one_batch_per_free_slot_and_leaves_the_rest_filling():
    jobs = [batch_echo.enqueue(n) for n in range(7)]

    found = claim(slots=2)

    assert [ids(batch) for _, batch in found.batches] == [
        [job.pk for job in jobs[:3]],
        [job.pk for job in jobs[3:6]],
    ]
    rest = claim(slots=5)
    assert rest.batches == [] and 0 < rest.due_in <= 60
    assert fresh(jobs[6]).status == "ready"


def test_a_batch_takes_its_items_by_priority_then_age():
    low = batch_echo.using(priority=-5).enqueue("low")
    first = batch_echo.enqueue("first")
    high = batch_echo.using(priority=5).enqueue("high")
    second = batch_echo.enqueue("second")

    ((_, batch),) = claim().batches

    assert ids(batch) == [high.pk, first.pk, second.pk]
    assert fresh(low).status == "ready"


def test_a_paused_queue_gives_no_batch_and_no_due_time():
    batch_echo.enqueue("a")
    operations.pause_queue("default")

    found = claim(now=db_now() + dt.timedelta(hours=1))

    assert (found.batches, found.due_in) == ([], None)


def test_batches_come_from_every_served_queue_but_no_other():
    elsewhere = [batch_echo.using(queue="reports").enqueue(n) for n in range(3)]

    assert claim(queues=["default"]).batches == []
    ((_, batch),) = claim(queues=["default", "reports"]).batches
    assert ids(batch) == [job.pk for job in elsewhere]


def test_the_plain_claim_never_takes_a_batch_tasks_job():
    batch_echo.enqueue("a")
    assert driver_for("default").claim(["default"], 10, "plain") == []


@pytest.mark.postgres_only  # the planner's choice; SQLite's statement names it (INDEXED BY)
def test_postgresql_batch_claim_walks_the_flow_index():
    from django.db import connection
    from django.utils import timezone

    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            task_name="testproject.testapp.tasks.batch_echo", args=[n], priority=n % 5,
            flow_key=("batch:testproject.testapp.tasks.batch_echo", "batch:other", None)[n % 3],
            run_after=now - dt.timedelta(seconds=n % 40),
        )
        for n in range(3000)
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")
    with captured_statements() as statements:
        assert len(claim().batches) == 1
    # One read of every batch task's group, then the claim of the one group that is due.
    assert [sorted(params) for _, params in statements] == [
        ["keys", "now", "queues", "sizes"],
        ["key", "now", "owner", "queue", "size", "wait"],
    ]
    for sql, params in statements:
        plan = explain(sql, params)
        assert reads(plan, "wq_job_flow"), plan
        seq_scans = [
            line for line in plan.splitlines() if "Seq Scan on " + Job._meta.db_table in line
        ]
        assert not seq_scans, plan


# --- running ------------------------------------------------------------------------------------


def test_a_worker_runs_a_full_batch_in_one_call_and_each_job_gets_its_own_result(drain):
    items = [{"n": 1}, {"n": 2}, {"n": 3}]
    jobs = [batch_echo.enqueue(item) for item in items]

    worker = drain(concurrency=1)  # one slot: the batch takes it once

    assert worker.finished_count == 3
    for job, item in zip(jobs, items, strict=True):
        row = fresh(job)
        assert (row.status, row.attempt) == ("succeeded", 1)
        assert row.result == {"item": item, "batch": items}


def test_a_partial_batch_runs_once_batch_wait_has_passed(drain):
    # batch_size=50, batch_wait=0.2: a burst worker must wait for the batch, not give up.
    jobs = [batch_echo_soon.enqueue(n) for n in range(2)]

    drain()

    assert [fresh(job).status for job in jobs] == ["succeeded", "succeeded"]
    assert echo_batch(jobs[0]) == [0, 1]


def test_a_filling_batch_wakes_the_worker_when_its_wait_ends_however_long_the_poll():
    worker = Worker(queues=["default"], poll_interval=60)
    for service in worker.maintainer.services:
        service.next_run = math.inf  # only the heartbeat (10 s) and the batch bound the sleep
    worker.maintainer.next_check = math.inf
    batch_echo_soon.enqueue("a")  # batch_size=50, batch_wait=0.2
    assert worker._sleep_for() > 1

    assert worker.batches.fill(1) == 0  # filling: not due yet

    assert 0 < worker._sleep_for() <= 0.2


def test_priorities_order_the_items_of_the_call(drain):
    jobs = [batch_echo.using(priority=p).enqueue(f"p{p}") for p in (0, 5, -1)]

    drain()

    assert echo_batch(jobs[0]) == ["p5", "p0", "p-1"]


def test_a_wrong_number_of_results_fails_every_item_at_once_naming_both_counts(drain):
    jobs = [batch_wrong_count.enqueue(n) for n in range(3)]

    drain()

    for job in jobs:
        row = fresh(job)
        assert (row.status, row.attempt) == ("failed", 1)  # max_attempts=3: not retried
        (error,) = row.errors
        assert error["type"] == "django_workqueue.worker.batch.BatchResultMismatch"
        assert "called with 3 item(s) and must return a list of 3 result(s)" in error["message"]
        assert "it returned a list of 2" in error["message"]


def test_an_exception_is_a_failed_attempt_of_each_item_under_its_own_retry_policy(drain):
    once = batch_fails.using(max_attempts=1).enqueue("once")
    thrice = batch_fails.enqueue("thrice")  # max_attempts=3, backoff=0

    drain()

    once, thrice = fresh(once), fresh(thrice)
    assert (once.status, once.attempt, len(once.errors)) == ("failed", 1, 1)
    assert (thrice.status, thrice.attempt, len(thrice.errors)) == ("failed", 3, 3)
    assert thrice.errors[0]["type"] == "builtins.ValueError"
    assert thrice.errors[0]["message"] == "the batch of 2 failed"
    assert thrice.errors[1]["message"] == "the batch of 1 failed"  # retried alone


def test_discard_raised_by_the_batch_fails_every_item(drain):
    jobs = [batch_discards.enqueue(n) for n in range(2)]

    drain()

    for job in jobs:
        row = fresh(job)
        assert (row.status, row.attempt) == ("failed", 1)
        assert row.errors[0]["message"] == "none of the 2 items can be embedded"


def test_an_async_batch_task_runs_its_items_in_one_call(drain):
    jobs = [batch_echo_async.enqueue(n) for n in range(3)]

    drain()

    assert [fresh(job).result for job in jobs] == [
        {"item": n, "batch": [0, 1, 2]} for n in range(3)
    ]


def test_a_batch_step_receives_the_previous_value_and_releases_its_dependents(drain):
    workflow = chain(add.s(1, 2), batch_double.s(), add.s(10)).enqueue()

    drain()

    steps = Job.objects.filter(workflow_id=workflow.pk).order_by("id")
    assert [(job.task_name.rsplit(".", 1)[1], job.status, job.result) for job in steps] == [
        ("add", "succeeded", 3),
        ("batch_double", "succeeded", 6),
        ("add", "succeeded", 16),
    ]


def test_a_member_cancelled_mid_batch_ends_cancelled_while_the_others_succeed(
    background_worker,
):
    tasks.batch_gate.clear()
    try:
        with workqueue_settings(HEARTBEAT_INTERVAL=0.1):
            cancelled, kept = batch_gated.enqueue("a"), batch_gated.enqueue("b")
            worker = background_worker()
            wait_until(lambda: fresh(kept).status == "running", message="the batch to start")
            operations.cancel_job(cancelled)
            wait_until(
                lambda: worker._running[cancelled.pk].context.cancel_requested,
                message="the worker to hear of the cancellation",
            )
            tasks.batch_gate.set()
            wait_until(lambda: fresh(kept).status == "succeeded", message="the batch to end")
    finally:
        tasks.batch_gate.set()
    assert fresh(cancelled).status == "cancelled"
    assert fresh(kept).result == {"item": "b", "batch": ["a", "b"]}


def test_a_batch_still_running_past_the_shutdown_grace_is_released_item_by_item(
    background_worker,
):
    tasks.batch_gate.clear()
    try:
        jobs = [batch_gated.enqueue(item) for item in "ab"]
        budget = jobs[0].max_attempts
        worker = background_worker(grace_seconds=0)
        wait_until(lambda: {fresh(job).status for job in jobs} == {"running"})
        worker.stop()
        wait_until(lambda: {fresh(job).status for job in jobs} == {"ready"}, message="release")
    finally:
        tasks.batch_gate.set()
    join_slots(worker)
    for job in jobs:
        row = fresh(job)
        assert (row.lease_owner, row.errors) == (None, [])
        assert (row.max_attempts, row.attempts_charged) == (budget, 0)  # nothing spent
