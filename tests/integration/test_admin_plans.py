"""The admin's pages stay fast on a large jobs table: on PostgreSQL, next to 300,000 rows (most
finished, as in a real table), no query of a list page or of the dashboard reads the jobs table
by a sequential scan, and the counts are estimates, never a ``COUNT(*)`` over the table."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_workqueue.admin.pagination import EXACT_UP_TO, EstimatedCountPaginator
from django_workqueue.db.base import ACTIVE_STATUSES
from django_workqueue.models import Job

ROWS = 300_000
# (status, share per thousand): unfinished rows are 5 % of the table.
MIX = [("succeeded", 900), ("failed", 30), ("cancelled", 20), ("ready", 25),
       ("scheduled", 10), ("running", 5), ("blocked", 5), ("held", 5)]  # fmt: skip
TABLE = Job._meta.db_table


def seed(rows: int) -> None:
    """``rows`` jobs in one statement; failed ones carry an error, finished ones an end."""
    cases, edge = [], 0
    for status, share in MIX:
        edge += share
        cases.append(f"WHEN n %% 1000 < {edge} THEN '{status}'")
    status = f"CASE {' '.join(cases)} END"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (task_name, queue, priority, args, kwargs, status, attempt, "
            f"max_attempts, lease_seconds, run_after, progress_message, errors, enqueued_at, "
            f"finished_at, waiting_on, prerequisites_succeeded, run_condition, unique_key) "
            f"SELECT 'testproject.testapp.tasks.' || (ARRAY['add', 'send_mail', 'record'])"
            f"[1 + n %% 3], (ARRAY['default', 'mail', 'reports'])[1 + n %% 3], 0, '[1, 2]', "
            f"'{{}}', s.status, 1, 3, 60, now() - (n %% 3600) * interval '1 second', '', "
            f"CASE WHEN s.status = 'failed' THEN jsonb_build_array(jsonb_build_object("
            f"'attempt', 1, 'type', 'app.E' || (n %% 4), 'message', 'x', 'at', '')) "
            f"ELSE '[]'::jsonb END, now() - (%s - n) * interval '10 ms', "
            f"CASE WHEN s.status IN ('succeeded', 'failed', 'cancelled') "
            f"THEN now() - (%s - n) * interval '10 ms' END, 0, 0, 'all_succeeded', "
            f"CASE WHEN n %% 100 = 0 THEN 'key-' || n END "
            f"FROM generate_series(1, %s) AS n, LATERAL (SELECT {status} AS status) AS s",
            [rows, rows, rows],
        )
        cursor.execute(f"ANALYZE {TABLE}")


PAGES = [
    "/admin/django_workqueue/job/",
    "/admin/django_workqueue/job/?p=3",
    *[f"/admin/django_workqueue/job/?status__exact={status}" for status, _ in MIX],
    "/admin/django_workqueue/job/?queue=mail",
    "/admin/django_workqueue/job/?task=testproject.testapp.tasks.add",
    "/admin/django_workqueue/job/?workflow=1",
    "/admin/django_workqueue/job/?error_type=app.E1",
    "/admin/django_workqueue/job/?enqueued=1h",
    "/admin/django_workqueue/job/?q=12345",
    "/admin/django_workqueue/job/?q=key-500",
    "/admin/django_workqueue/job/?status__exact=failed&queue=mail",
    "/admin/django_workqueue/workflow/",
    "/admin/django_workqueue/dashboard/",
    "/admin/django_workqueue/queue/",
]


PRINT = False


def plan_of(sql: str, params: object) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.postgres_only
@pytest.mark.django_db
def test_no_admin_page_reads_the_jobs_table_by_a_sequential_scan() -> None:
    seed(ROWS)
    client = Client()
    client.force_login(User.objects.create_superuser("root", "r@example.com", "x"))

    for url in PAGES:
        with CaptureQueriesContext(connection) as captured:
            response = client.get(url)
        assert response.status_code == 200, url
        on_jobs = [
            q["sql"] for q in captured.captured_queries
            if f'"{TABLE}"' in q["sql"] and not q["sql"].startswith("EXPLAIN")
        ]  # fmt: skip
        assert on_jobs or "/job/" not in url, url
        for sql in on_jobs:
            plan = plan_of(sql, None)
            assert f"Seq Scan on {TABLE}" not in plan, (url, sql, plan)
            # A sort only ever orders a filtered part of the table, never the whole of it.
            for rows in re.findall(r"Sort  \(cost=[\d.]+ rows=(\d+)", plan):
                assert int(rows) < ROWS // 10, (url, sql, plan)
            # A count is bounded by a LIMIT, or counts unfinished jobs only (the stats, through
            # a partial index of them).
            if "COUNT(" in sql:
                listed = ", ".join(f"'{status}'" for status in ACTIVE_STATUSES)
                unfinished = f'"status" IN ({listed})'  # wq_job_active's own list
                assert "LIMIT" in sql or unfinished in sql, (url, sql, plan)
            if PRINT:
                print(url, "\n", sql[:300], "\n", plan, "\n")


@pytest.mark.postgres_only
@pytest.mark.django_db
def test_large_counts_are_the_planners_estimates() -> None:
    seed(ROWS)
    everything = EstimatedCountPaginator(Job.objects.all(), 50)
    failed = EstimatedCountPaginator(Job.objects.filter(status="failed"), 50)
    ready = EstimatedCountPaginator(Job.objects.filter(status="ready", queue="mail"), 50)

    assert abs(everything.count - ROWS) < ROWS * 0.1
    assert everything.estimated
    assert failed.count == ROWS * 30 // 1000  # exact below the cap
    assert not failed.approximate
    assert ready.count == Job.objects.filter(status="ready", queue="mail").count()
    assert EXACT_UP_TO < ROWS


def test_counts_above_the_cap_without_statistics_are_shown_as_the_cap_and_more(
    db, monkeypatch
) -> None:
    from tests.support.factories import JobFactory

    monkeypatch.setattr("django_workqueue.admin.pagination.EXACT_UP_TO", 5)
    monkeypatch.setattr(
        "django_workqueue.db.base.Driver.estimate_count", lambda self, queryset: None
    )
    monkeypatch.setattr(
        "django_workqueue.db.postgresql.PostgresDriver.estimate_count",
        lambda self, queryset: None,
    )
    JobFactory.create_batch(8)
    paginator = EstimatedCountPaginator(Job.objects.all(), 2)
    assert paginator.count == 6
    assert (paginator.approximate, paginator.estimated) == (True, False)
    few = EstimatedCountPaginator(Job.objects.filter(status="held"), 2)
    assert few.count == 0
    assert not few.approximate

    client = Client()
    client.force_login(User.objects.create_superuser("root", "r@example.com", "x"))
    html = client.get("/admin/django_workqueue/job/").content.decode()
    assert '<span class="wq-count">6+</span>' in html
