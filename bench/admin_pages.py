"""The admin's page times next to a million jobs (PostgreSQL): ``python bench/admin_pages.py``.

Builds a scratch database (``<BENCH_DB_PREFIX>admin_pages``, dropped at the end), migrates it,
fills the jobs table with ``--rows`` jobs in one ``INSERT … SELECT generate_series`` (most
finished, as a real table is: the mix of ``tests/integration/test_admin_plans.py``), runs
``VACUUM ANALYZE``, then times each admin page with Django's test client (a logged-in
superuser; the full request, templates included), ``--repeat`` times after one warm-up, and
prints the medians as a Markdown table (the numbers in ``docs/guides/admin.md``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import pgadmin  # noqa: E402

PAGES = [
    ("job list", "/admin/django_workqueue/job/"),
    ("job list, page 100", "/admin/django_workqueue/job/?p=100"),
    ("job list, failed", "/admin/django_workqueue/job/?status__exact=failed"),
    ("job list, ready in mail", "/admin/django_workqueue/job/?status__exact=ready&queue=mail"),
    ("job list, one task", "/admin/django_workqueue/job/?task=testproject.testapp.tasks.add"),
    ("job list, error type", "/admin/django_workqueue/job/?error_type=app.E1"),
    ("job list, search by id", "/admin/django_workqueue/job/?q=123456"),
    ("job list, search by unique key", "/admin/django_workqueue/job/?q=key-500"),
    ("job page", "/admin/django_workqueue/job/{failed}/change/"),
    ("workflow list", "/admin/django_workqueue/workflow/"),
    ("queues", "/admin/django_workqueue/queue/"),
    ("workers", "/admin/django_workqueue/workerprocess/"),
    ("dashboard", "/admin/django_workqueue/dashboard/"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    options = parser.parse_args()

    database = f"{pgadmin.DATABASE_PREFIX}admin_pages"
    pgadmin.create_database(database)
    os.environ["DATABASE_URL"] = pgadmin.url(database)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    try:
        run(database, options.rows, options.repeat)
    finally:
        from django.db import connections

        connections.close_all()
        pgadmin.drop_database(database)


def run(database: str, rows: int, repeat: int) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.test.utils import setup_test_environment

    from django_workqueue.models import Job

    settings.ALLOWED_HOSTS = ["*"]
    setup_test_environment()
    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(_fill_sql(Job._meta.db_table, rows))  # no parameters: no % escaping
    pgadmin.vacuum_analyze(database)
    print(f"filled {rows:,} jobs in {time.perf_counter() - started:.0f} s", file=sys.stderr)

    failed = Job.objects.filter(status="failed").order_by("-id").values_list("pk", flat=True)[0]
    client = Client()
    client.force_login(User.objects.create_superuser("bench", "bench@example.com", "x"))
    print(f"| page ({rows:,} jobs, PostgreSQL) | median ms | min ms | max ms |")
    print("|---|---:|---:|---:|")
    for label, url in PAGES:
        url = url.format(failed=failed)
        assert client.get(url).status_code == 200, url  # the warm-up, and a check
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, url
        print(f"| {label} | {statistics.median(times):.0f} | {min(times):.0f} | "
              f"{max(times):.0f} |")  # fmt: skip


def _fill_sql(table: str, rows: int) -> str:
    mix = [("succeeded", 900), ("failed", 30), ("cancelled", 20), ("ready", 25),
           ("scheduled", 10), ("running", 5), ("blocked", 5), ("held", 5)]  # fmt: skip
    cases, edge = [], 0
    for status, share in mix:
        edge += share
        cases.append(f"WHEN n % 1000 < {edge} THEN '{status}'")
    status = f"CASE {' '.join(cases)} END"
    sql = (
        f"INSERT INTO {table} (task_name, queue, priority, args, kwargs, status, attempt, "
        f"max_attempts, lease_seconds, run_after, progress_message, errors, enqueued_at, "
        f"finished_at, waiting_on, prerequisites_succeeded, run_condition, unique_key) "
        f"SELECT 'testproject.testapp.tasks.' || (ARRAY['add', 'send_mail', 'record'])"
        f"[1 + n % 3], (ARRAY['default', 'mail', 'reports'])[1 + n % 3], 0, '[1, 2]', '{{}}', "
        f"s.status, 1, 3, 60, now() - (n % 3600) * interval '1 second', '', "
        f"CASE WHEN s.status = 'failed' THEN jsonb_build_array(jsonb_build_object('attempt', "
        f"1, 'type', 'app.E' || (n % 4), 'message', 'x', 'at', '', 'traceback', "
        f"repeat('Traceback line\n', 40))) ELSE '[]'::jsonb END, "
        f"now() - ({rows} - n) * interval '10 ms', "
        f"CASE WHEN s.status IN ('succeeded', 'failed', 'cancelled') "
        f"THEN now() - ({rows} - n) * interval '10 ms' END, 0, 0, 'all_succeeded', "
        f"CASE WHEN n % 100 = 0 THEN 'key-' || n END "
        f"FROM generate_series(1, {rows}) AS n, LATERAL (SELECT {status} AS status) AS s"
    )
    return sql


if __name__ == "__main__":
    main()
