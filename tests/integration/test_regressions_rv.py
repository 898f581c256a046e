"""Regressions found by reviewing the fault battery's engine changes."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import OperationalError, connection

from django_workqueue import task
from django_workqueue.db import Outcome, OutcomeKind, driver_for
from django_workqueue.exceptions import InvalidOption
from django_workqueue.models import Job
from django_workqueue.payload import describe
from django_workqueue.registry import MAX_ATTEMPTS
from django_workqueue.states import Status
from django_workqueue.worker.lease import LeaseKeeper, RunningJob
from tests.support.database import fresh
from tests.support.factories import JobFactory
from tests.support.processes import MANAGE_PY, REPO_ROOT


@pytest.mark.django_db
def test_a_job_released_at_shutdown_keeps_its_place_in_the_queue() -> None:
    """A release sent the job behind every job enqueued after it (run_after = now), while a
    crashed job, reaped, keeps its run_after: a deploy's SIGTERM must not be worse than a crash."""
    job = JobFactory(running=True, lease_owner="w1")
    run_after = job.run_after - dt.timedelta(minutes=5)
    Job.objects.filter(pk=job.pk).update(run_after=run_after)
    release = Outcome(job_id=job.pk, attempt=1, kind=OutcomeKind.RELEASE, max_attempts=3)

    assert driver_for("default").record("w1", release)

    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts) == (Status.READY, 1, 4)
    assert job.run_after == run_after
    assert (job.lease_owner, job.errors) == (None, [])


class _FailingDriver:
    def __init__(self) -> None:
        self.calls = 0

    def renew(self, owner: str, leases: Any) -> dict[int, bool]:
        self.calls += 1
        raise OperationalError("server closed the connection unexpectedly")


def _running(lease_seconds: int) -> dict[int, RunningJob]:
    job = SimpleNamespace(lease_seconds=lease_seconds, attempt=1)
    context = SimpleNamespace(job=job, attempt=1, finished=False, lease_lost=False)
    return {1: RunningJob(context)}  # type: ignore[arg-type]


def test_a_renewal_that_fails_stays_due() -> None:
    """A failed renewal moved the next one a whole interval away: with a lease of three
    intervals, one blip plus one failed retry lost every lease. It must stay due, so the
    control loop retries it after its error backoff."""
    keeper = LeaseKeeper(_FailingDriver(), "w1")  # type: ignore[arg-type]
    keeper.next_renewal = 0.0
    with pytest.raises(OperationalError):
        keeper.renew(_running(lease_seconds=3))
    assert keeper.due(0.0) and keeper.next_renewal == 0.0


def test_a_task_budget_past_the_largest_is_refused_at_decoration() -> None:
    """Snoozes, releases and redrives add to max_attempts: a budget near PostgreSQL's integer
    limit made those writes fail (a snoozed job was dead-lettered)."""
    with pytest.raises(InvalidOption, match=r"max_attempts must be from 1 to 1,000,000"):
        task(name="tests.too_many", max_attempts=MAX_ATTEMPTS + 1)(lambda: None)


@pytest.mark.postgres_only  # SQLite's JSON functions refuse rows nested past 1,000 levels
@pytest.mark.django_db(transaction=True)
def test_arguments_nested_past_the_parser_fail_the_job_at_once(drain: Any) -> None:
    """A row (written by raw SQL) nested deeper than Python's JSON parser goes raised
    RecursionError in the slot: no outcome, and the job waited for the reaper every attempt.
    12,000 levels: past the parser of every supported Python (3.13's goes furthest, to ~10,000),
    within what PostgreSQL's jsonb accepts with its default stack."""
    depth = 12_000
    job = JobFactory(args=[], max_attempts=3)
    table = Job._meta.db_table
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET args = %s{cast} WHERE id = %s",
            ["[" * depth + "]" * depth, job.pk],
        )
    drain(concurrency=1)
    # Not through the model: Django's JSONField cannot read those args back either.
    row = Job.objects.values("status", "attempt", "errors").get(pk=job.pk)
    assert (row["status"], row["attempt"]) == (Status.FAILED, 1)
    [error] = row["errors"]
    assert error["type"].endswith("MalformedArguments")
    assert "nested too deeply" in error["message"]


def test_describe_survives_a_broken_repr() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise ValueError("no repr for you")

    assert describe(Broken()) == "<a test_describe_survives_a_broken_repr.<locals>.Broken>"
    assert describe(10**5000).startswith("<an integer of ")


def _runworker(database_url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    return subprocess.Popen(
        [sys.executable, str(MANAGE_PY), "runworker"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_database_that_does_not_exist_stops_runworker_at_once() -> None:
    """No wait cures a missing database or a rejected password: the worker must not wait for
    ever (a deploy check would never see it fail)."""
    process = _runworker("postgres://postgres@127.0.0.1:5432/wq_no_such_database")
    try:
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode != 0
    assert 'database "wq_no_such_database" does not exist' in stderr
    assert "retrying" not in stderr


@pytest.mark.postgres_only
@pytest.mark.django_db(transaction=True)
def test_the_reaper_announces_jobs_it_puts_back_in_ready() -> None:
    """A job put back in ready by the reaper woke nobody: with LISTEN/NOTIFY and a long poll
    interval, it waited for some worker's next poll. The reaper now notifies their queues."""
    from django_workqueue.db.postgresql import CHANNEL
    from django_workqueue.maintenance import reaper

    settings = connection.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        settings.pop(key, None)
    import psycopg

    with psycopg.connect(**settings, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        JobFactory(expired=True, queue="mail")
        JobFactory(expired=True, queue="mail")
        JobFactory(expired=True, queue="reports", attempt=3, max_attempts=3)  # spent: failed
        assert reaper.run_once() == 3
        queues = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
        queues += [n.payload for n in listener.notifies(timeout=0.5)]
    assert queues == ["mail"]  # once per queue, and not for the job that failed
