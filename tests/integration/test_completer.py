"""The completer: every finished job's outcome is written once, whatever happens to progress.

Progress reports and outcomes are written in separate batches; a report the database refuses,
a row another session holds locked, a lost connection or a deleted row never drops an outcome,
and never drops another job's report.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import DataError, OperationalError

from django_workqueue import InvalidProgress
from django_workqueue.context import JobContext
from django_workqueue.db import Outcome, OutcomeKind, driver_for
from django_workqueue.models import Job
from django_workqueue.worker.completer import Completer
from tests.support.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "worker-a"


def claimed_context(job: Job) -> JobContext:
    """A context for a running job of OWNER, as the worker builds it after a claim."""
    Job.objects.filter(pk=job.pk).update(status="ready", lease_owner=None, attempt=0)
    [claimed] = [c for c in driver_for("default").claim(["default"], 100, OWNER) if c.id == job.pk]
    return JobContext(
        claimed, owner=OWNER, driver=driver_for("default"), on_progress=lambda c: None
    )


def success(context: JobContext) -> Outcome:
    return Outcome(
        job_id=context.job_id, attempt=context.attempt, kind=OutcomeKind.SUCCEEDED,
        max_attempts=context.job.max_attempts, result_json="1",
    )  # fmt: skip


@pytest.fixture
def completer() -> Completer:
    return Completer(driver_for("default"), OWNER)


def test_a_report_the_database_refuses_drops_neither_outcomes_nor_other_reports(
    completer: Completer, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad, good, done = (claimed_context(JobFactory()) for _ in range(3))
    driver = driver_for("default")
    write_progress = driver.write_progress

    def refusing(owner: str, reports: Any, **kwargs: Any) -> Any:
        if any(report.job_id == bad.job_id for report in reports):
            raise DataError("value out of range")  # what the database says to a bad value
        return write_progress(owner, reports, **kwargs)

    monkeypatch.setattr(driver, "write_progress", refusing)
    for context, n in ((bad, 1), (good, 2)):
        context.set_progress(n, 10, "working")
        completer.report(context)
    completer.hand_over(success(done))

    completer.write_progress()
    completer.write_outcomes()

    assert Job.objects.get(pk=good.job_id).progress_current == 2  # not thrown away with bad's
    assert Job.objects.get(pk=done.job_id).status == "succeeded"


def test_a_lost_connection_keeps_every_report_and_outcome_for_the_next_pass(
    completer: Completer, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = claimed_context(JobFactory())
    context.set_progress(3, 4, "nearly")
    completer.report(context)
    other = claimed_context(JobFactory())
    completer.hand_over(success(other))
    driver = driver_for("default")
    for name in ("write_progress", "record_many"):
        monkeypatch.setattr(driver, name, _raise(OperationalError("server closed the connection")))
    with pytest.raises(OperationalError):
        completer.write_progress()
    with pytest.raises(OperationalError):
        completer.write_outcomes()
    monkeypatch.undo()

    completer.write_progress()
    _, written = completer.write_outcomes()

    assert Job.objects.get(pk=context.job_id).progress_current == 3
    assert (
        written == {(other.job_id, other.attempt)}
        and Job.objects.get(pk=other.job_id).status == "succeeded"
    )


def _raise(error: Exception) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error

    return fail


def test_the_last_report_lands_with_the_outcome_in_one_write(completer: Completer) -> None:
    context = claimed_context(JobFactory())
    context.set_progress(10, 10, "done")
    completer.report(context)
    completer.hand_over(success(context))

    completer.write_outcomes()  # no progress pass in between

    job = Job.objects.get(pk=context.job_id)
    assert (job.status, job.progress_current, job.progress_message) == ("succeeded", 10, "done")
    assert completer.pending == 0


def test_an_outcome_for_a_job_deleted_while_it_ran_is_dropped_with_a_log_line_that_says_so(
    completer: Completer, caplog: pytest.LogCaptureFixture
) -> None:
    context = claimed_context(JobFactory())
    Job.objects.filter(pk=context.job_id).delete()
    completer.hand_over(success(context))

    with caplog.at_level(logging.WARNING, logger="django_workqueue.worker"):
        done, written = completer.write_outcomes()

    assert (len(done), written, completer.pending) == (1, set(), 0)  # not kept: not retried
    assert any("row is gone" in r.getMessage() for r in caplog.records), caplog.text


@pytest.mark.postgres_only  # row locks; SQLite locks the database, and writes wait for it
def test_a_locked_row_keeps_its_report_and_outcome_for_later_and_stalls_no_other_job(
    completer: Completer, hold_row: Callable[[int], threading.Event]
) -> None:
    locked, other = claimed_context(JobFactory()), claimed_context(JobFactory())
    for context in (locked, other):
        context.set_progress(1, 2, "half")
        completer.report(context)
    release = hold_row(locked.job_id)

    completer.write_progress()
    assert Job.objects.get(pk=other.job_id).progress_current == 1
    assert Job.objects.get(pk=locked.job_id).progress_current is None  # kept, not waited for
    completer.hand_over(success(locked))
    completer.hand_over(success(other))
    _, written = completer.write_outcomes()
    assert written == {(other.job_id, other.attempt)}
    assert completer.pending == 1  # the locked job's outcome, kept for a later pass

    release.set()
    from tests.support.waiting import wait_until

    wait_until(lambda: completer.write_outcomes()[1], timeout=10, message="the locked outcome")
    job = Job.objects.get(pk=locked.job_id)
    assert (job.status, job.progress_current) == ("succeeded", 1)  # its report rode along


@pytest.mark.parametrize(
    ("current", "total"), [(10**30, None), (1, -(2**63) - 1), ("many", None), (float("inf"), None)]
)
def test_a_progress_value_the_row_cannot_hold_is_refused_in_the_task(current, total) -> None:
    context = claimed_context(JobFactory())
    with pytest.raises(InvalidProgress, match="set_progress") as caught:
        context.set_progress(current, total)
    assert isinstance(caught.value, ValueError)
    assert context.progress is None  # nothing half-reported


def test_a_message_is_made_storable_before_it_is_cut_to_fit() -> None:
    context = claimed_context(JobFactory())
    assert context.set_progress(1, None, "\x00" * 500) is True
    message = context.progress[2]  # type: ignore[index]
    assert len(message) == 500 and set(message) <= set("\\x0")
    context.write_progress()
    assert Job.objects.get(pk=context.job_id).progress_message == message
