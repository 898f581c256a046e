"""django-workqueue, driven through its public surfaces only.

Enqueue: ``noop.enqueue()`` / ``noop.enqueue_many()``; work: ``manage.py runworker``; settings:
``bench.settings`` (the test project's plus the bench task). The claim-latency metric calls
``django_workqueue.db.driver_for(alias).claim(queues, limit, owner)``, the driver's entry point.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .. import pgadmin
from ..bootstrap import BENCH_DIR, ROOT
from .base import System

SQLITE_DIR = BENCH_DIR / "results" / "sqlite"


class Workqueue(System):
    name = "workqueue"
    label = "django-workqueue"
    table_prefix = "django_workqueue_"
    unfinished_sql = "SELECT count(*) FROM django_workqueue_job WHERE status <> 'succeeded'"
    single_api = "noop.enqueue(i)"
    bulk_api = "noop.enqueue_many(calls)"

    def database_url(self) -> str:
        return pgadmin.url(self.database)

    def system_env(self) -> dict[str, str]:
        return {
            "DJANGO_SETTINGS_MODULE": "bench.settings",
            "DATABASE_URL": self.database_url(),
            "WORKQUEUE_POLL_INTERVAL": str(self.options.poll_interval),
            "WORKQUEUE_LISTEN_NOTIFY": "1",
        }

    def install(self) -> None:
        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"],
            env=self.env(), cwd=ROOT, check=True,
        )  # fmt: skip

    def drain_settings(self) -> list[dict[str, Any]]:
        # runworker's default writes one line per job (INFO on django_workqueue.jobs); the
        # last setting turns that line off (-v 0: warnings and errors only), as a busy
        # deployment may, at the largest concurrency.
        line_on = [{"concurrency": k} for k in self.options.wq_concurrency]
        return [*line_on, {"concurrency": max(self.options.wq_concurrency), "verbosity": 0}]

    def worker_command(self, setting: dict[str, Any], *, burst: bool) -> list[str]:
        """``runworker`` for ``setting``: its concurrency, its pool (``"pool"``: ``threads``, the
        default, or ``processes``) and its queues (``"queues": None`` serves every queue of the
        settings, as ``runworker`` without ``--queues`` does)."""
        command = [sys.executable, str(ROOT / "manage.py"), "runworker",
                   "--concurrency", str(setting.get("concurrency", 1))]  # fmt: skip
        if setting.get("pool"):
            command += ["--pool", setting["pool"]]
        if "verbosity" in setting:
            command += ["--verbosity", str(setting["verbosity"])]
        queues = setting.get("queues", "default")
        command += ["--queues", queues] if queues else []
        return [*command, "--burst"] if burst else command

    def latency_variants(self) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
        setting = {"concurrency": 4}
        return [
            ("", setting, {"WORKQUEUE_LISTEN_NOTIFY": "1"}),
            ("no_notify", setting, {"WORKQUEUE_LISTEN_NOTIFY": "0"}),
        ]


class WorkqueueSQLite(Workqueue):
    """The same project on a SQLite file: fresh copy of a migrated template for every run."""

    name = "workqueue_sqlite"
    label = "django-workqueue (SQLite)"

    @property
    def path(self) -> Path:
        return SQLITE_DIR / "bench.sqlite3"

    @property
    def template(self) -> Path:
        return SQLITE_DIR / "template.sqlite3"

    def database_url(self) -> str:
        return f"sqlite:///{self.path}"

    def drain_settings(self) -> list[dict[str, Any]]:
        return [{"concurrency": k} for k in self.options.sqlite_concurrency]

    def create(self) -> None:
        SQLITE_DIR.mkdir(parents=True, exist_ok=True)
        self._remove(self.path)
        self.install()
        self._remove(self.template)
        shutil.copyfile(self.path, self.template)

    def drop(self) -> None:
        self._remove(self.path)
        self._remove(self.template)

    def reset(self) -> None:
        self._remove(self.path)
        shutil.copyfile(self.template, self.path)

    def after_fill(self) -> None:
        pass  # no VACUUM ANALYZE on SQLite; the file is fresh from the template every run

    def unfinished(self) -> int:
        return int(self.client("unfinished"))

    @staticmethod
    def _remove(path: Path) -> None:
        for candidate in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            candidate.unlink(missing_ok=True)


# --- client actions (run in ``python -m bench.client``; Django is set up here) -----------------


def _noop() -> Any:
    import django

    django.setup()
    from bench.workqueue_tasks import noop

    return noop


def client_enqueue_single(n: int) -> float:
    noop = _noop()
    noop.enqueue(-1)  # connect and warm up outside the clock
    started = time.perf_counter()
    for key in range(n):
        noop.enqueue(key)
    return n / (time.perf_counter() - started)


def client_enqueue_bulk(n: int, batch: int) -> float:
    noop = _noop()
    noop.enqueue_many([((-1,), {})])
    started = time.perf_counter()
    for start in range(0, n, batch):
        noop.enqueue_many([((key,), {}) for key in range(start, min(n, start + batch))])
    return n / (time.perf_counter() - started)


def client_fill(n: int) -> int:
    noop = _noop()
    for start in range(0, n, 5000):
        noop.enqueue_many([((key,), {}) for key in range(start, min(n, start + 5000))])
    return n


def client_raw_insert(n: int) -> float:
    """The reference: a bare single-row ``INSERT … VALUES … RETURNING id`` per transaction.

    The row is a copy of one that ``noop.enqueue()`` wrote (every column, so the reference
    follows the schema and pays for the same indexes); bare psycopg inserts it ``n`` times in
    autocommit, one transaction each, with the server-side prepared statements psycopg uses.
    """
    import os

    import psycopg
    from psycopg import sql
    from psycopg.types.json import Jsonb

    noop = _noop()
    from django_workqueue.models import Job

    job = noop.enqueue(-1)
    table = Job._meta.db_table
    columns = [field.column for field in Job._meta.concrete_fields if not field.primary_key]
    with psycopg.connect(os.environ["BENCH_DSN"], autocommit=True) as raw:
        types = dict(
            raw.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = %s",
                [table],
            ).fetchall()
        )
        identifiers = sql.SQL(", ").join(map(sql.Identifier, columns))
        row = raw.execute(
            sql.SQL("SELECT {} FROM {} WHERE id = %s").format(identifiers, sql.Identifier(table)),
            [job.pk],
        ).fetchone()
        assert row is not None
        values = [
            Jsonb(value) if types[column] == "jsonb" else value
            for column, value in zip(columns, row, strict=True)
        ]
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id").format(
            sql.Identifier(table), identifiers, sql.SQL(", ").join(sql.Placeholder() * len(columns))
        )
        for _ in range(10):  # past psycopg's prepare threshold, outside the clock
            raw.execute(insert, values).fetchone()
        started = time.perf_counter()
        for _ in range(n):
            raw.execute(insert, values).fetchone()
        return n / (time.perf_counter() - started)


def client_latency(n: int, gap: float, stamp_file: str) -> list[float]:
    from bench.latency import measure

    noop = _noop()
    return measure(noop.enqueue, n, gap, Path(stamp_file))


def client_unfinished() -> int:
    _noop()
    from django_workqueue.models import Job

    return Job.objects.exclude(status="succeeded").count()


def client_slices(size: int) -> dict[str, Any]:
    """Jobs/s of each run of ``size`` consecutive completions, from the jobs' finished_at."""
    _noop()
    from django.db.models import Min

    from django_workqueue.models import Job

    done = Job.objects.filter(status="succeeded")
    first_start = done.aggregate(first=Min("started_at"))["first"].timestamp()
    finished = [
        at.timestamp() for at in done.order_by("finished_at").values_list("finished_at", flat=True)
    ]
    rates, previous = [], first_start
    for end in range(size, len(finished) + 1, size):
        rates.append(size / max(finished[end - 1] - previous, 1e-9))
        previous = finished[end - 1]
    return {"rates": rates, "jobs": len(finished)}


def copy_job(template_id: int, copies: int) -> None:
    """Insert ``copies`` copies of job ``template_id`` in one statement (new ids only).

    The template is a job written by the public API, so every copy holds exactly what enqueue
    writes (its status, run_after, payload). PostgreSQL counts with ``generate_series``;
    SQLite with a recursive CTE. Measured: 1,000,000 rows in 9 s on PostgreSQL and 5 s on
    SQLite, where ``enqueue_many`` in calls of 10,000 writes about 30,000 jobs/s.
    """
    from django.db import connections

    from django_workqueue.conf import workqueue_settings
    from django_workqueue.models import Job

    connection = connections[workqueue_settings.DATABASE]
    quote = connection.ops.quote_name
    table = quote(Job._meta.db_table)
    columns = ", ".join(
        quote(field.column) for field in Job._meta.concrete_fields if not field.primary_key
    )
    if connection.vendor == "postgresql":
        sql = (
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table} "
            f"CROSS JOIN generate_series(1, %s) WHERE id = %s"
        )
    else:
        sql = (
            f"INSERT INTO {table} ({columns}) WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL "
            f"SELECT i + 1 FROM n WHERE i < %s) SELECT {columns} FROM {table} CROSS JOIN n "
            f"WHERE id = %s"
        )
    with connection.cursor() as cursor:
        cursor.execute(sql, [copies, template_id])


def client_claim_latency(sizes: list[int], batch: int, claims: int, reps: int) -> dict[str, Any]:
    """Milliseconds per ``claim()`` of ``batch`` jobs with ``size`` ready jobs behind it.

    Ready rows are copies of a job enqueued through the public API (``copy_job``), then
    VACUUM ANALYZE.
    Each repetition times ``claims`` consecutive claims and keeps their median.
    """
    import os
    import statistics

    noop = _noop()
    from django_workqueue.conf import workqueue_settings
    from django_workqueue.db import driver_for
    from django_workqueue.models import Job

    template = noop.enqueue(0)
    driver = driver_for(workqueue_settings.DATABASE)
    results: dict[str, Any] = {}
    for size in sorted(sizes):
        missing = size - Job.objects.filter(status="ready").count()
        if missing > 0:
            copy_job(template.pk, missing)
        pgadmin.vacuum_analyze(os.environ["BENCH_DB"])
        driver.claim(["default"], batch, "bench-claim")  # warm the plan and the cache
        medians = []
        for _ in range(reps):
            timings = []
            for _ in range(claims):
                started = time.perf_counter()
                claimed = driver.claim(["default"], batch, "bench-claim")
                timings.append((time.perf_counter() - started) * 1000)
                assert len(claimed) == batch, f"claimed {len(claimed)} of {batch}"
            medians.append(statistics.median(timings))
        results[str(size)] = medians
    return results
