"""Running one job: whatever fails outside the task's body still ends the attempt with a
recorded failure that names it, and every failed attempt is logged for log handlers."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from django_workqueue import task
from django_workqueue.exceptions import Discard
from django_workqueue.models import Job
from tests.support.database import fresh

pytestmark = pytest.mark.django_db(transaction=True)


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


@task(max_attempts=2, backoff=0)
def always_fails(context: Any) -> None:
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


def test_every_failed_attempt_is_logged_warning_while_it_retries_error_when_it_fails(
    drain, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="django_workqueue")
    job = always_fails.enqueue()
    drain()
    assert fresh(job).status == "failed"
    records = [r for r in caplog.records if getattr(r, "job_id", None) == job.pk]
    assert [(r.levelno, r.attempt) for r in records] == [  # type: ignore[attr-defined]
        (logging.WARNING, 1),
        (logging.ERROR, 2),
    ]
    for record in records:
        message = record.getMessage()
        assert always_fails.name in message and f"job {job.pk}" in message
        assert "ValueError" in message and "went wrong" in message
        assert record.exc_info is not None and record.exc_info[0] is ValueError
    assert "retrying" in records[0].getMessage()
    assert "dead-lettered" in records[1].getMessage()


def test_a_discard_and_an_unknown_task_are_logged_as_errors(drain, caplog):
    from tests.support.factories import JobFactory

    caplog.set_level(logging.WARNING, logger="django_workqueue")
    discarded = discards.enqueue()
    unknown = JobFactory(task_name="removed.module.task", max_attempts=1)
    drain()
    for job, kind in ((discarded, "Discard"), (unknown, "TaskNotRegistered")):
        [record] = [r for r in caplog.records if getattr(r, "job_id", None) == job.pk]
        assert record.levelno == logging.ERROR and kind in record.getMessage()
    assert Job.objects.get(pk=unknown.pk).status == "failed"
