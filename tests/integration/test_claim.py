"""The claim statement of each driver: what it takes, what it writes, and that it never hands
one job to two claimers. The clock is injected with ``now=`` where a test needs the future.
"""

from __future__ import annotations

import datetime as dt
import threading
from typing import Any

import pytest
from django.db import connection, connections
from django.utils import timezone

from django_workqueue.db import driver_for
from django_workqueue.models import Job
from tests.support.database import db_now, fresh
from tests.support.factories import JobFactory
from tests.support.plans import captured_statements

OWNER = "owner-x"


def claim(queues=("default",), limit=10, owner=OWNER, now=None):
    return driver_for("default").claim(list(queues), limit, owner, now=now)


def claimed_ids(**options: Any) -> list[int]:
    return [job.id for job in claim(**options)]


@pytest.mark.django_db
class TestClaim:
    def test_claims_at_most_limit_and_leases_them(self):
        jobs = JobFactory.create_batch(5, lease_seconds=45)

        claimed = claim(limit=3)

        assert [job.id for job in claimed] == [job.pk for job in jobs[:3]]
        assert all(job.attempt == 1 for job in claimed)
        now = db_now()
        for job in jobs[:3]:
            job = fresh(job)
            assert (job.status, job.attempt, job.lease_owner) == ("running", 1, OWNER)
            assert job.lease_expires_at - job.started_at == dt.timedelta(seconds=45)
            assert abs(job.started_at - now) < dt.timedelta(seconds=5)
        assert [fresh(job).status for job in jobs[3:]] == ["ready", "ready"]

    def test_claimed_job_carries_what_the_worker_needs(self):
        job = JobFactory(
            task_name="testproject.testapp.tasks.send_mail", queue="mail", priority=7,
            args=["ada@example.com"], kwargs={"subject": "hi"}, max_attempts=4, lease_seconds=9,
        )  # fmt: skip

        [claimed] = claim(queues=["mail"])

        assert (claimed.id, claimed.task_name, claimed.queue, claimed.priority) == (
            job.pk,
            "testproject.testapp.tasks.send_mail",
            "mail",
            7,
        )
        assert (claimed.args, claimed.kwargs) == (["ada@example.com"], {"subject": "hi"})
        assert (claimed.attempt, claimed.max_attempts, claimed.lease_seconds) == (1, 4, 9)

    def test_each_claim_is_a_new_attempt(self):
        job = JobFactory(attempt=2, max_attempts=5)

        [claimed] = claim()

        assert claimed.attempt == 3
        assert fresh(job).attempt == 3

    def test_respects_queues(self):
        default = JobFactory(queue="default")
        mail = JobFactory(queue="mail")
        reports = JobFactory(queue="reports")

        assert claimed_ids(queues=["mail", "reports"]) == sorted([mail.pk, reports.pk])
        assert fresh(default).status == "ready"
        assert claimed_ids(queues=["low"]) == []

    def test_only_ready_jobs_are_claimed(self):
        JobFactory(running=True)
        JobFactory(failed=True)
        JobFactory(status="blocked")
        JobFactory(status="cancelled")
        JobFactory(status="succeeded", attempt=1)
        ready = JobFactory()

        assert claimed_ids() == [ready.pk]

    def test_future_run_after_is_not_claimed_until_the_clock_reaches_it(self):
        soon = timezone.now() + dt.timedelta(hours=1)
        soon = soon.replace(microsecond=soon.microsecond // 1000 * 1000)  # SQLite keeps ms
        future = JobFactory(run_after=soon, lease_seconds=30)

        assert claimed_ids() == []
        assert claimed_ids(now=soon - dt.timedelta(seconds=1)) == []

        assert claimed_ids(now=soon) == [future.pk]
        future = fresh(future)
        assert future.status == "running"
        # The injected clock is the one the lease is measured from.
        assert future.started_at == soon
        assert future.lease_expires_at == soon + dt.timedelta(seconds=30)

    def test_higher_priority_first_then_oldest_run_after_then_id(self):
        base = timezone.now() - dt.timedelta(minutes=1)
        low = JobFactory(priority=-5, run_after=base)
        late_high = JobFactory(priority=10, run_after=base + dt.timedelta(seconds=2))
        early_high = JobFactory(priority=10, run_after=base + dt.timedelta(seconds=1))
        tie_a = JobFactory(priority=0, run_after=base)
        tie_b = JobFactory(priority=0, run_after=base)

        order = [claimed_ids(limit=1)[0] for _ in range(5)]

        assert order == [early_high.pk, late_high.pk, tie_a.pk, tie_b.pk, low.pk]

    def test_priority_decides_across_queues(self):
        JobFactory(queue="default", priority=1)
        urgent = JobFactory(queue="mail", priority=9)
        JobFactory(queue="reports", priority=5)

        assert claimed_ids(queues=["default", "mail", "reports"], limit=1) == [urgent.pk]

    def test_the_returned_batch_is_in_priority_order(self):
        jobs = [JobFactory(priority=p) for p in (0, 3, -1, 3)]

        claimed = claim(limit=4)

        assert [job.id for job in claimed] == [jobs[1].pk, jobs[3].pk, jobs[0].pk, jobs[2].pk]

    def test_nothing_to_claim(self):
        assert claim() == []


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_get_the_same_job():
    # PostgreSQL: claimers skip each other's locked rows; SQLite: claims serialise on the one
    # write lock. Either way each job goes to exactly one claimer.
    jobs = JobFactory.create_batch(120, queue="default")
    threads_count = 6
    start = threading.Barrier(threads_count)
    results: dict[str, list[int]] = {}
    failures: list[BaseException] = []

    def claimer(name: str) -> None:
        try:
            start.wait(10)
            mine: list[int] = []
            while batch := claimed_ids(limit=3, owner=name):
                mine.extend(batch)
            results[name] = mine
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    threads = [
        threading.Thread(target=claimer, args=(f"claimer-{n}",)) for n in range(threads_count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert failures == []
    all_claimed = [job_id for ids in results.values() for job_id in ids]
    assert len(all_claimed) == len(set(all_claimed)) == len(jobs)
    assert set(all_claimed) == {job.pk for job in jobs}
    rows = Job.objects.values_list("id", "status", "attempt", "lease_owner")
    owner_of = {job_id: name for name, ids in results.items() for job_id in ids}
    assert {row[0]: row[1:] for row in rows} == {
        job_id: ("running", 1, owner) for job_id, owner in owner_of.items()
    }


# --- the query plan -----------------------------------------------------------------------


def explain_claim(queues: list[str], explain: str) -> str:
    with captured_statements() as statements:
        assert len(claim(queues=queues, limit=10)) == 10
    [(sql, params)] = statements
    with connection.cursor() as cursor:
        cursor.execute(f"{explain} {sql}", params)
        return "\n".join(" ".join(str(part) for part in row) for row in cursor.fetchall())


def seed_ready_jobs(count: int) -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        Job(
            task_name="testproject.testapp.tasks.add",
            queue=("default", "mail")[n % 2],
            priority=n % 7 - 3,
            args=[n, n],
            run_after=now - dt.timedelta(seconds=n % 50),
        )
        for n in range(count)
    )
    # Finished rows that the partial index leaves out, as in a real table.
    Job.objects.bulk_create(
        Job(task_name="testproject.testapp.tasks.add", status="succeeded", attempt=1)
        for _ in range(count // 4)
    )


# PostgreSQL only: the planner's choice is what is asserted; SQLite's claim names its index
# with INDEXED BY (see the next test), so there the statement fails without it.
@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_postgresql_claim_walks_the_claim_index():
    seed_ready_jobs(2000)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")

    plan = explain_claim(["default", "mail"], "EXPLAIN")

    assert "wq_job_claim" in plan, plan
    seq_scans = [line for line in plan.splitlines() if "Seq Scan" in line]
    assert not [line for line in seq_scans if Job._meta.db_table in line], plan


@pytest.mark.django_db
def test_sqlite_claim_uses_the_claim_index(vendor):
    if vendor != "sqlite":
        pytest.skip("SQLite's EXPLAIN QUERY PLAN; PostgreSQL has its own test above")
    seed_ready_jobs(2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    plan = explain_claim(["default", "mail"], "EXPLAIN QUERY PLAN")

    assert "wq_job_claim" in plan, plan
    assert f"SCAN {Job._meta.db_table}\n" not in plan + "\n", plan


@pytest.mark.django_db
@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
def test_sqlite_claim_updates_its_rows_by_primary_key(vendor, analyzed):
    """The claim's UPDATE looks up the ids its subquery picked by primary key and touches no
    index on status, with or without statistics: through the index on status
    (wq_job_status_finished) it would visit every ready row while it holds SQLite's one write
    lock, ~100 ms per million ready jobs, and every other writer, web requests too, would wait."""
    if vendor != "sqlite":
        pytest.skip("SQLite's planner; the PostgreSQL claim's plan is asserted above")
    seed_ready_jobs(2000)
    if analyzed:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

    for queues in (["default"], ["default", "mail"]):
        plan = explain_claim(queues, "EXPLAIN QUERY PLAN").splitlines()
        assert not [line for line in plan if "(status=?)" in line], plan
        assert "wq_job_status_finished" not in " ".join(plan), plan
        assert [line for line in plan if "INTEGER PRIMARY KEY (rowid=?)" in line], plan
        assert [line for line in plan if "wq_job_claim" in line], plan


@pytest.mark.django_db
def test_sqlite_claims_across_queues_walk_each_queue_in_index_order_without_sorting_it(vendor):
    if vendor != "sqlite":
        pytest.skip("SQLite's EXPLAIN QUERY PLAN; the PostgreSQL claim is one LATERAL per queue")
    seed_ready_jobs(2000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    plan = explain_claim(["default", "mail"], "EXPLAIN QUERY PLAN")

    # Each queue's branch reads wq_job_claim in its order and stops at the limit: only the
    # few rows the branches return are sorted, never the backlog. Plan rows are (id, parent,
    # unused, detail), and SQLite prints a sort on a row of its own under the branch it
    # sorts, so the branches are found by their index search and their sorts by parent.
    rows = [line.split(" ", 3) for line in plan.splitlines()]
    branches = {parent for _, parent, _, detail in rows if "wq_job_claim (queue=?" in detail}
    assert len(branches) == 2, plan
    sorted_in_a_branch = [
        detail for _, parent, _, detail in rows if parent in branches and "TEMP B-TREE" in detail
    ]
    assert not sorted_in_a_branch, plan


@pytest.mark.django_db
def test_a_multi_queue_claim_takes_the_best_jobs_of_all_queues_in_order():
    now = timezone.now()
    for queue, priority in [("mail", 5), ("default", 1), ("reports", 9), ("default", 7)]:
        JobFactory(queue=queue, priority=priority, run_after=now - dt.timedelta(seconds=1))
    claimed = claim(queues=["default", "mail", "reports"], limit=3)
    assert [(c.queue, c.priority) for c in claimed] == [("reports", 9), ("default", 7), ("mail", 5)]
