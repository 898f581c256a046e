"""Regressions found by the fault battery's claim-race and SQLite embedded-mode tests
(tests/chaos/test_claim_race.py, tests/chaos/test_sqlite_embedded.py).
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_workqueue.db import driver_for
from django_workqueue.models import Job

pytestmark = pytest.mark.django_db


def claim_plan(queues: list[str]) -> list[str]:
    """The claim statement exactly as the driver runs it, through EXPLAIN QUERY PLAN."""
    statements = []

    def capture(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        assert len(driver_for("default").claim(queues, 10, "owner-cr")) == 10
    [(sql, params)] = statements
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return [row[3] for row in cursor.fetchall()]


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
def test_sqlite_claim_updates_its_rows_by_primary_key(vendor: str, analyzed: bool) -> None:
    """The SQLite claim's UPDATE reached the rows its subquery picked through the index on
    status (wq_job_status_finished), visiting every ready row: each claim held the one write
    lock for ~100 ms per million ready jobs (4 ms per claim at the claim race's 50,000), and
    every other writer, web requests included, waited that long. It must look up the picked
    ids by primary key and touch no index on status."""
    if vendor != "sqlite":
        pytest.skip("SQLite's planner; the PostgreSQL claim's plan is asserted in test_claim.py")
    Job.objects.bulk_create(
        Job(task_name="testproject.testapp.tasks.add", queue=("default", "mail")[n % 2])
        for n in range(2_000)
    )
    Job.objects.bulk_create(
        Job(task_name="testproject.testapp.tasks.add", status="succeeded", attempt=1)
        for _ in range(500)
    )
    if analyzed:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")

    for queues in (["default"], ["default", "mail"]):
        plan = claim_plan(queues)
        assert not [line for line in plan if "(status=?)" in line], plan
        assert "wq_job_status_finished" not in " ".join(plan), plan
        assert [line for line in plan if "INTEGER PRIMARY KEY (rowid=?)" in line], plan
        assert [line for line in plan if "wq_job_claim" in line], plan
