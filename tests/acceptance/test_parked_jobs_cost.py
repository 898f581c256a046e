"""A parked job costs an idle worker nothing (issue 33): over a window of the same length, an idle
``runworker`` beside 10,000 waiting and 10,000 sleeping jobs sends the same statements as an idle
worker alone. PostgreSQL only: the acceptance database of the issue, and the one whose worker
waits on LISTEN/NOTIFY rather than polling.

Each statement the worker's Django connections send is logged by
``tests/acceptance/settings_statement_log.py``; statements are compared by shape (the text, its
numbers blanked: the SQL carries its values as parameters). The window is counted in passes of
the reaper (``WORKQUEUE_REAPER_INTERVAL`` 0.2 s), not in seconds: both windows end once the
worker has run the same number of them (about 30 s). A service on a longer interval lands in
a window once more or less, whatever its phase: retention (once a minute: one pass is three
statements of one shape, a delete per final status), the fallback poll (every 60-90 s), and
the statements every maintenance transaction begins with (the lock timeout, one per pass of
any service). So a shape's counts may differ by one pass: by at most 3. And the maintenance
lease's renewals (with the lock timeout each begins with) come every half second by the clock,
while the window is counted in reaper passes: a window whose passes ran slower (a CI
run: 60 against 67 renewals once) holds more of them. So a shape may also differ by 15 % of
its count; one that grew with the 20,000 parked jobs would differ by far more.
A statement that grows with the parked jobs fails that; the promoter's promotion and the
time-out of waits, the statements that act on parked jobs, must not run at all, since none of
them falls due.
"""

from __future__ import annotations

import datetime as dt
import re
import signal
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection

from django_workqueue.models import Checkpoint, Job
from django_workqueue.states import Status
from tests.support.database import db_now
from tests.support.processes import StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

PARKED = 10_000
REAPER_PASSES = 150
"""About 30 s of the reaper's 0.2 s interval."""
SETTLE = 10
_REAPER = 'SELECT "django_workqueue_job"."id" AS "id", "django_workqueue_job"."lease_owner" AS "lease_owner", CASE WHEN "django_workqueue_job"."lease_expires_at" <'  # noqa: E501
"""The first statement of every reaper pass (maintenance/reaper.py: the jobs whose lease ran out
or whose worker is gone, with which of the two)."""


_ACTING_ON_PARKED = (
    "WITH due AS MATERIALIZED",  # the promotion (db/postgresql.py)
    'SELECT "django_workqueue_checkpoint"."job_id"',  # waits timed out (workflow/inbox.py)
)


def _shapes(log: Path) -> Counter[str]:
    """The statements from the start of reaper pass SETTLE to the start of pass SETTLE +
    REAPER_PASSES, by shape: the start (the first passes, before the LISTEN connection is up,
    run the promoter unconditionally) and the stop are left out."""
    lines = log.read_text().splitlines()
    passes = [n for n, line in enumerate(lines) if line.startswith(_REAPER)]
    window = lines[passes[SETTLE] : passes[SETTLE + REAPER_PASSES]]
    return Counter(re.sub(r"\d+", "N", line) for line in window)


def _idle_window(start_worker: StartWorker, log: Path, name: str) -> Counter[str]:
    """The statements of one idle worker, from its start to its stop after REAPER_PASSES."""
    env = {"DJANGO_SETTINGS_MODULE": "tests.acceptance.settings_statement_log",
           "WQ_STATEMENT_LOG": str(log)}  # fmt: skip
    worker = start_worker("--concurrency", "2", name=name, env=env)
    log.touch()
    wait_for(
        lambda: sum(line.startswith(_REAPER) for line in log.read_text().splitlines())
        > SETTLE + REAPER_PASSES,
        alive=[worker], message=f"{REAPER_PASSES} passes of the reaper",
        timeout=REAPER_PASSES * 0.2 * 2 + 60,
    )  # fmt: skip
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    return _shapes(log)


def _park(count: int) -> None:
    """``count`` jobs waiting for a signal (no timeout) and ``count`` sleeping for a day, with
    their checkpoints, as the body of each left them."""
    now = db_now()
    tomorrow = now + dt.timedelta(days=1)
    task = "tests.support.durable_tasks.waits_for_approval"
    waiting = Job.objects.bulk_create(
        Job(task_name=task, status=Status.WAITING, run_after=now, attempt=1) for _ in range(count)
    )
    sleeping = Job.objects.bulk_create(
        Job(task_name=task, status=Status.SCHEDULED, run_after=tomorrow, attempt=1)
        for _ in range(count)
    )
    Checkpoint.objects.bulk_create(
        [Checkpoint(job=job, kind=Checkpoint.Kind.WAIT, name="1", signal="approve")
         for job in waiting]
        + [Checkpoint(job=job, kind=Checkpoint.Kind.SLEEP, name="1",
                      wakes_at=tomorrow) for job in sleeping]
    )  # fmt: skip
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_workqueue_job")


@pytest.mark.postgres_only
def test_an_idle_worker_beside_parked_jobs_sends_what_an_idle_worker_alone_sends(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    alone = _idle_window(start_worker, tmp_path / "alone.log", "alone")
    _park(PARKED)
    beside = _idle_window(start_worker, tmp_path / "beside.log", "beside")

    assert Job.objects.filter(status=Status.WAITING).count() == PARKED  # none was touched
    assert Job.objects.filter(status=Status.SCHEDULED).count() == PARKED
    differ = {
        shape[:100]: (alone[shape], beside[shape])
        for shape in set(alone) | set(beside)
        if abs(alone[shape] - beside[shape]) > max(3, 0.15 * max(alone[shape], beside[shape]))
    }
    assert not differ, (
        f"statements whose count differs by more than a pass (alone, beside): {differ}"
    )
    acting = [shape for shape in beside if shape.startswith(_ACTING_ON_PARKED)]
    assert not acting, f"statements that act on parked jobs, none of which fell due: {acting}"
    print(f"\nby shape (alone, beside): {[(k[:70], a, beside[k]) for k, a in alone.most_common()]}")
    print(f"\nstatements: alone {sum(alone.values())}, beside {2 * PARKED:,} parked jobs "
          f"{sum(beside.values())}, over {REAPER_PASSES} reaper passes")  # fmt: skip
