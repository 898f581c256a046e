"""Running one job (``attempt/run.py``, ``attempt/ending.py``): how each way a task ends becomes
an outcome, and whatever fails outside the task's body still ends the attempt with a recorded
failure that names it; every failed attempt is logged for log handlers. Run by in-process workers
(``drain``)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from django_workqueue import task
from django_workqueue.exceptions import Discard
from django_workqueue.models import Job
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from testproject.testapp.tasks import (
    add,
    always_fails,
    async_add,
    async_too_slow,
    classified,
    discard_me,
    flaky,
    progress,
    record,
    retry_later,
    returns_object,
    snooze_once,
    times_out,
)
from tests.support.database import fresh, ledger, parse_at
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.tasks import fails_with_backoff, reports_twice

pytestmark = pytest.mark.django_db(transaction=True)

EXC = "django_workqueue.exceptions"


def error_summary(job: Job) -> list[tuple[int, str, str]]:
    return [(e["attempt"], e["type"], e["message"]) for e in job.errors]


# --- how an attempt ends ------------------------------------------------------------------


def _backoff_that_raises(attempt: int) -> float:
    raise ZeroDivisionError("backoff bug")


@task(max_attempts=2, backoff=_backoff_that_raises)
def fails_with_a_broken_backoff() -> None:
    raise ValueError("the task's own failure")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


@task(max_attempts=1)
def raises_an_unprintable_exception() -> None:
    raise Unprintable()


def _on_failure_that_raises(exc: BaseException) -> str:
    raise KeyError("classifier bug")


@task(max_attempts=1, on_failure=_on_failure_that_raises)
def fails_with_a_broken_classifier() -> None:
    raise ValueError("the task's own failure")


@task(max_attempts=2, backoff=3600, on_failure=_on_failure_that_raises)
def fails_with_a_broken_classifier_and_a_long_backoff() -> None:
    raise ValueError("the task's own failure")


@task(max_attempts=2, backoff=0)
def fails_every_time(context: Any) -> None:
    raise ValueError(f"attempt {context.attempt} went wrong")


@task(max_attempts=3)
def discards() -> None:
    raise Discard("account closed")


def test_a_backoff_that_raises_still_ends_the_attempt_with_a_failure_naming_it(drain):
    job = fails_with_a_broken_backoff.enqueue()
    drain()
    job = fresh(job)
    assert job.status in ("ready", "failed", "scheduled") and job.status != "running"
    first = job.errors[0]
    assert first["attempt"] == 1
    assert "ZeroDivisionError: backoff bug" in first["message"]
    assert "ValueError: the task's own failure" in first["message"]
    assert "LeaseExpired" not in {e["type"] for e in job.errors}


def test_an_exception_whose_str_raises_is_recorded(drain):
    job = raises_an_unprintable_exception.enqueue()
    drain()
    job = fresh(job)
    assert job.status == "failed"
    [error] = job.errors
    assert error["type"].endswith("Unprintable")
    assert "str() raised RuntimeError" in error["message"]


def test_an_on_failure_that_raises_is_named_in_the_recorded_failure(drain):
    job = fails_with_a_broken_classifier.enqueue()
    drain()
    job = fresh(job)
    assert job.status == "failed"
    [error] = job.errors
    assert "on_failure" in error["message"] and "KeyError" in error["message"]
    assert "ValueError: the task's own failure" in error["message"]


def test_an_on_failure_that_raises_leaves_the_retry_to_the_tasks_own_backoff(drain):
    job = fails_with_a_broken_classifier_and_a_long_backoff.enqueue()
    drain()
    job = fresh(job)
    assert (job.status, job.attempt) == ("scheduled", 1)
    [error] = job.errors
    assert "retried as usual" in error["message"]
    # backoff=3600 spread by RETRY_JITTER (0.1), not the default backoff (2 s on attempt 1).
    delay = (job.run_after - parse_at(error["at"])).total_seconds()
    assert 3240 - 0.01 <= delay <= 3960 + 0.01


def test_every_failed_attempt_is_logged_warning_while_it_retries_error_when_it_fails(
    drain, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="django_workqueue")
    job = fails_every_time.enqueue()
    drain()
    assert fresh(job).status == "failed"
    records = [r for r in caplog.records if getattr(r, "job_id", None) == job.pk]
    assert [(r.levelno, r.attempt) for r in records] == [  # type: ignore[attr-defined]
        (logging.WARNING, 1),
        (logging.ERROR, 2),
    ]
    for entry in records:
        message = entry.getMessage()
        assert fails_every_time.name in message and f"#{job.pk} " in message
        assert "ValueError" in message and "went wrong" in message
        assert "Traceback" not in message  # only at DEBUG (runworker -v 2)
    assert records[0].exc_info is None  # a retry: no traceback for a handler to print
    # The dead-letter carries its exception for error trackers (docs/guides/deployment.md).
    assert records[1].exc_info is not None and records[1].exc_info[0] is ValueError
    assert "(attempt 1/2, retry in" in records[0].getMessage()
    assert "dead-lettered" in records[1].getMessage()


def test_a_discard_and_an_unknown_task_are_logged_as_errors(drain, caplog):
    caplog.set_level(logging.WARNING, logger="django_workqueue")
    discarded = discards.enqueue()
    unknown = JobFactory(task_name="removed.module.task", max_attempts=1)
    drain()
    for job, kind in ((discarded, "Discard"), (unknown, "TaskNotRegistered")):
        [record] = [r for r in caplog.records if getattr(r, "job_id", None) == job.pk]
        assert record.levelno == logging.ERROR and kind in record.getMessage()
    assert Job.objects.get(pk=unknown.pk).status == "failed"


def test_flaky_task_succeeds_on_attempt_three_with_two_errors(drain):
    job = flaky.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == ("succeeded", 3, "succeeded on attempt 3")
    assert error_summary(job) == [
        (1, "builtins.ConnectionError", "flaky failure on attempt 1"),
        (2, "builtins.ConnectionError", "flaky failure on attempt 2"),
    ]
    for error in job.errors:
        assert "Traceback (most recent call last)" in error["traceback"]
        assert "in flaky" in error["traceback"]
        assert f"ConnectionError: flaky failure on attempt {error['attempt']}" in error["traceback"]
        assert error["at"]
    assert ledger(job) == [(1, ""), (2, ""), (3, "")]


def test_always_failing_task_ends_in_the_dead_letter_queue(drain):
    job = always_fails.enqueue()
    ok = add.enqueue(1, 2)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts) == ("failed", 3, 3)
    assert job.finished_at is not None and job.result is None
    assert error_summary(job) == [
        (n, "builtins.ValueError", f"boom on attempt {n}") for n in (1, 2, 3)
    ]
    assert list(Job.objects.dead_letters()) == [job]
    assert fresh(ok).status == "succeeded"


def test_backoff_delay_is_applied_after_a_failure(drain):
    job = fails_with_backoff.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("scheduled", 1)
    assert error_summary(job) == [(1, "builtins.ValueError", "failure on attempt 1")]
    # backoff=30 on attempt 1: 30 s, spread by RETRY_JITTER (0.1): between 27 and 33 seconds
    # after the failure was recorded (both times come from the database in one statement).
    delay = (job.run_after - parse_at(job.errors[0]["at"])).total_seconds()
    assert 27 - 0.01 <= delay <= 33 + 0.01


def test_retry_with_delay_sets_run_after(drain):
    job = retry_later.enqueue(3600)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("scheduled", 1)
    assert error_summary(job) == [(1, f"{EXC}.Retry", "try again later")]
    delay = (job.run_after - parse_at(job.errors[0]["at"])).total_seconds()
    assert delay == pytest.approx(3600, abs=0.01)


def test_retry_without_delay_runs_again_and_counts_an_attempt(drain):
    job = retry_later.enqueue(0)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result, job.max_attempts) == ("succeeded", 2, 2, 3)
    assert [e["type"] for e in job.errors] == [f"{EXC}.Retry"]


def test_snooze_does_not_charge_an_attempt(drain):
    job = snooze_once.enqueue()  # max_attempts=1: a charged snooze would end the job failed

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == ("succeeded", 2, 2)
    # Two claims, one body attempt spent (the success): the snooze spent nothing, and the
    # task's budget is not rewritten.
    assert (job.max_attempts, job.attempts_charged) == (1, 1)
    assert job.errors == []
    assert ledger(job) == [(1, ""), (2, "")]


def test_snooze_with_delay_puts_the_job_back_for_later(drain):
    job = snooze_once.enqueue(delay=600)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts, job.attempts_charged) == (
        "scheduled", 1, 1, 0,
    )  # fmt: skip
    assert job.finished_at is None
    assert job.run_after - job.started_at >= dt.timedelta(seconds=599)


def test_discard_fails_at_once_with_attempts_left(drain):
    job = discard_me.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts) == ("failed", 1, 5)
    assert error_summary(job) == [(1, f"{EXC}.Discard", "the account was deleted")]
    assert ledger(job) == [(1, "")]


@workqueue_settings(RETRY_BACKOFF_BASE=0)
def test_on_failure_classifier_discards_or_retries(drain):
    discarded = classified.enqueue(key_error=True)
    retried = classified.enqueue(key_error=False)

    drain()

    discarded = fresh(discarded)
    assert (discarded.status, discarded.attempt) == ("failed", 1)
    assert error_summary(discarded) == [(1, "builtins.KeyError", "'missing'")]
    retried = fresh(retried)
    assert (retried.status, retried.attempt) == ("failed", 5)
    assert error_summary(retried) == [(n, "builtins.OSError", "transient") for n in range(1, 6)]


# --- timeouts, async tasks, progress, bad results ------------------------------------------


@workqueue_settings(RETRY_BACKOFF_BASE=0)
def test_sync_task_past_its_timeout_records_job_timeout(drain):
    job = times_out.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("failed", 3)
    assert [(e["attempt"], e["type"]) for e in job.errors] == [
        (n, f"{EXC}.JobTimeout") for n in (1, 2, 3)
    ]
    assert "timeout of 0.3s" in job.errors[0]["message"]
    assert [attempt for attempt, _ in ledger(job)] == [1, 2, 3]


def test_async_task_runs(drain):
    jobs = [async_add.enqueue(n, 10) for n in range(3)]

    drain()

    assert [(fresh(j).status, fresh(j).result) for j in jobs] == [
        ("succeeded", 10),
        ("succeeded", 11),
        ("succeeded", 12),
    ]


def test_async_task_past_its_timeout_fails_with_job_timeout(drain):
    job = async_too_slow.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("failed", 1)
    assert [e["type"] for e in job.errors] == [f"{EXC}.JobTimeout"]


def test_progress_is_stored(drain):
    job = progress.enqueue(4)

    drain()

    job = fresh(job)
    assert (job.status, job.result) == ("succeeded", 4)
    assert job.progress == {"current": 4, "total": 4, "message": "step 4"}


def test_the_last_progress_report_lands_before_the_outcome_for_every_job(drain, monkeypatch):
    # Reports are written by the control thread. Widen the gap between its progress pass and
    # its outcome pass, so jobs finish inside it: the outcome write must never overtake the
    # job's last report (it would fence the report out).
    original = Worker._write_progress

    def slow_write_progress(self):
        original(self)
        time.sleep(0.02)  # widens a race window; nothing waits on it

    monkeypatch.setattr(Worker, "_write_progress", slow_write_progress)
    # Each job's first report wakes the control thread; its last report and its outcome
    # arrive while that pass is still in its widened window.
    jobs = reports_twice.enqueue_many([((), {})] * 12)

    drain(concurrency=4)

    stored = Job.objects.filter(pk__in=[j.pk for j in jobs])
    assert {(j.status, j.progress_current, j.progress_message) for j in stored} == {
        ("succeeded", 2, "done")
    }


def test_result_that_is_not_json_fails_the_job(drain):
    job = returns_object.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == ("failed", 1, None)
    [error] = job.errors
    assert error["type"] == f"{EXC}.ResultNotJSON"
    assert "returns_object" in error["message"] and "builtins.object" in error["message"]


# --- jobs the worker cannot run -----------------------------------------------------------


@workqueue_settings(RETRY_BACKOFF_BASE=0)
def test_unknown_task_name_fails_after_its_attempts_and_the_worker_goes_on(drain):
    gone = JobFactory(task_name="gone.module.task", max_attempts=2, priority=50)
    others = [add.enqueue(n, n) for n in range(3)]

    drain(concurrency=1)

    gone = fresh(gone)
    assert (gone.status, gone.attempt) == ("failed", 2)
    assert [(e["attempt"], e["type"]) for e in gone.errors] == [
        (1, f"{EXC}.TaskNotRegistered"),
        (2, f"{EXC}.TaskNotRegistered"),
    ]
    assert "'gone.module.task'" in gone.errors[0]["message"]
    assert [(fresh(j).status, fresh(j).result) for j in others] == [
        ("succeeded", 0),
        ("succeeded", 2),
        ("succeeded", 4),
    ]


@pytest.mark.postgres_only  # SQLite's JSON functions refuse rows nested past 1,000 levels
def test_arguments_nested_past_the_parser_fail_the_job_at_once(drain):
    """A row (written by raw SQL) nested deeper than Python's JSON parser goes fails at once with
    MalformedArguments: a RecursionError in the slot would leave no outcome, and the job would
    wait for the reaper on every attempt. 12,000 levels: past the parser of every supported
    Python (3.13's goes furthest, to ~10,000), within what PostgreSQL's jsonb accepts with its
    default stack."""
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


def test_deadline_passed_before_run_fails_without_running(drain):
    expired = record.using(deadline=timezone.now() - dt.timedelta(minutes=1)).enqueue(note="x")
    in_time = record.using(deadline=dt.timedelta(hours=1)).enqueue(note="y")

    drain()

    expired = fresh(expired)
    assert (expired.status, expired.attempt) == ("failed", 1)
    assert [e["type"] for e in expired.errors] == [f"{EXC}.DeadlineExceeded"]
    assert ledger(expired) == []
    assert fresh(in_time).status == "succeeded"
    assert ledger(in_time) == [(1, "y")]
