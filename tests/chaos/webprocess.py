"""A stand-in for a web process of an embedded (SQLite) deployment, for tests/chaos.

Run with the test interpreter from the repository root, with ``DJANGO_SETTINGS_MODULE`` and
``DATABASE_URL`` of the live test database (``tests.acceptance.processes.worker_environment``)::

    python -m tests.chaos.webprocess --requests 300 --ledger LEDGER --out SUMMARY.json

Each "request" is what a view of the application would do:

- a write request: inside ``transaction.atomic()`` it reads (counts ready jobs), enqueues one
  chaos job and writes a row of its own (a ``LedgerEntry`` with ``note="web"`` naming the job),
  so the job and the row commit together (the transactional enqueue). Every ``ROLLBACK_EVERY``-th
  request then fails, as a view that fails validation would: neither the job nor the row may
  remain;
- a read request in autocommit: counts of jobs by status and of its own rows.

A ``database is locked`` error is a failed request, as a user would see it: the request is not
retried, and each is counted, with every other error, in the JSON summary written to ``--out``.
The connection uses the busy timeout ``docs/explanation/sqlite.md`` recommends (5 s, not the
test project's 20 s), so that the documented configuration is the one under test.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

ROLLBACK_EVERY = 7
DOCUMENTED_BUSY_TIMEOUT_MS = 5000


class ViewFailed(Exception):
    """A request that fails after it enqueued: its transaction rolls back."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--ledger", required=True, help="the chaos ledger file for the jobs")
    parser.add_argument("--sleep", type=float, default=0.0, help="chaos_work body, seconds")
    parser.add_argument("--pause", type=float, default=0.005, help="between requests, seconds")
    parser.add_argument("--busy-timeout-ms", type=int, default=DOCUMENTED_BUSY_TIMEOUT_MS)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()

    import django

    django.setup()
    summary = serve(options)
    Path(options.out).write_text(json.dumps(summary))


def serve(options: argparse.Namespace) -> dict[str, Any]:
    from django.db import OperationalError, connection, transaction
    from django.db.models import Count

    from django_workqueue.models import Job
    from django_workqueue.states import Status
    from testproject.testapp.models import LedgerEntry
    from testproject.testapp.tasks import chaos_atomic, chaos_work

    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(f"PRAGMA busy_timeout = {int(options.busy_timeout_ms)}")

    committed: list[int] = []
    summary: dict[str, Any] = {
        "pid": os.getpid(),
        "requests": 0,
        "committed": 0,
        "rolled_back": 0,
        "locked_writes": 0,
        "locked_reads": 0,
        "errors": [],
        "job_ids": committed,
        "slowest_write_s": 0.0,
    }

    def failed(exc: Exception, kind: str) -> None:
        if isinstance(exc, OperationalError) and "locked" in str(exc):
            summary[f"locked_{kind}s"] += 1
        if len(summary["errors"]) < 20:
            summary["errors"].append(f"{kind}: {type(exc).__name__}: {exc}")

    for n in range(1, options.requests + 1):
        summary["requests"] += 1
        # Three in four enqueue a plain job (an external effect), one an atomic=True one.
        task = chaos_atomic if n % 4 == 0 else chaos_work
        sleep = 0.0 if task is chaos_atomic else options.sleep  # atomic bodies hold the lock
        began = time.monotonic()
        try:
            with transaction.atomic():
                Job.objects.filter(status=Status.READY).count()
                job = task.enqueue(ledger=options.ledger, sleep=sleep)
                LedgerEntry.objects.create(job_id=job.pk, attempt=0, pid=os.getpid(), note="web")
                if n % ROLLBACK_EVERY == 0:
                    raise ViewFailed(n)
        except ViewFailed:
            summary["rolled_back"] += 1
        except Exception as exc:
            failed(exc, "write")
        else:
            committed.append(job.pk)
            summary["committed"] += 1
        summary["slowest_write_s"] = max(summary["slowest_write_s"], time.monotonic() - began)
        try:
            dict(Job.objects.values_list("status").annotate(n=Count("id")))
            LedgerEntry.objects.filter(note="web").count()
        except Exception as exc:
            failed(exc, "read")
        time.sleep(options.pause)  # pacing, as requests arrive: not a wait for a condition
    summary["slowest_write_s"] = round(summary["slowest_write_s"], 3)
    return summary


if __name__ == "__main__":
    main()
