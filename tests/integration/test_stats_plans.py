"""``stats.snapshot()`` never scans the jobs table: on PostgreSQL, next to a million rows (most
finished, as in a real table), its plans read the jobs table through ``wq_job_active`` by an
index-only scan, and nothing else."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext

from django_workqueue import stats
from django_workqueue.models import Job

ROWS = 1_000_000
# (status, share of the million): unfinished rows are 5 % of the table.
MIX = [("succeeded", 900), ("failed", 30), ("cancelled", 20), ("ready", 25),
       ("scheduled", 10), ("running", 5), ("blocked", 5), ("held", 5)]  # fmt: skip


def seed(rows: int) -> None:
    table = Job._meta.db_table
    cases = []
    edge = 0
    for status, share in MIX:
        edge += share
        cases.append(f"WHEN n %% 1000 < {edge} THEN '{status}'")
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (task_name, queue, priority, args, kwargs, status, attempt, "
            f"max_attempts, lease_seconds, run_after, progress_message, errors, enqueued_at, "
            f"waiting_on, prerequisites_succeeded, run_condition) "
            f"SELECT 'task' || (n %% 20), (ARRAY['default', 'mail', 'reports'])[1 + n %% 3], 0, "
            f"'[]', '{{}}', CASE {' '.join(cases)} END, 1, 3, 60, "
            f"now() - (n %% 3600) * interval '1 second', '', '[]', now(), 0, 0, 'all_succeeded' "
            f"FROM generate_series(1, %s) AS n",
            [rows],
        )
        cursor.execute(f"VACUUM ANALYZE {table}")  # the visibility map an index-only scan needs


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_the_snapshot_reads_the_jobs_table_only_by_index_only_scans() -> None:
    seed(ROWS)

    with CaptureQueriesContext(connection) as captured:
        snap = stats.snapshot()

    table = Job._meta.db_table
    on_jobs = [q["sql"] for q in captured.captured_queries if table in q["sql"]]
    assert on_jobs, captured.captured_queries
    for sql in on_jobs:
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {sql}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert f"Seq Scan on {table}" not in plan, plan
        assert "Index Only Scan using wq_job_active" in plan, plan
        assert "Bitmap Heap Scan" not in plan, plan
    # And the numbers are those of the table.
    ready = Job.objects.filter(status="ready").count()
    assert sum(q.backlog for q in snap.queues) == ready == ROWS * 25 // 1000
    by_status = dict(
        Job.objects.filter(status__in=["blocked", "scheduled", "held", "running"])
        .order_by()
        .values_list("status")
        .annotate(n=Count("id"))
    )
    for status, n in by_status.items():
        assert sum(q.counts[status] for q in snap.queues) == n


@pytest.mark.django_db(transaction=True)
def test_on_sqlite_the_snapshot_reads_the_covering_index_of_unfinished_rows(vendor: str) -> None:
    """SQLite uses a partial index only for a condition written as the index's own: the
    driver's count names wq_job_active's statuses literally and reads that index, never the
    table's finished rows (with statistics that say most rows share few statuses, SQLite
    would otherwise scan the table)."""
    if vendor != "sqlite":
        pytest.skip("SQLite's EXPLAIN QUERY PLAN; PostgreSQL has its own test above")
    # As in a real table, most rows are finished (here 90 %).
    statuses = ["ready", "running", *["succeeded"] * 18]
    Job.objects.bulk_create(Job(task_name="t", status=statuses[n % 20]) for n in range(4000))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    with CaptureQueriesContext(connection) as captured:
        stats.snapshot()

    table = Job._meta.db_table
    on_jobs = [q["sql"] for q in captured.captured_queries if table in q["sql"]]
    assert on_jobs
    for sql in on_jobs:
        with connection.cursor() as cursor:
            # The captured text keeps its named parameters: give them a value.
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", {"now": "2000-01-01 00:00:00"})
            plan = "\n".join(row[3] for row in cursor.fetchall())
        assert f"SCAN {table}\n" not in plan + "\n", plan
        assert "USING COVERING INDEX wq_job_active" in plan, plan
