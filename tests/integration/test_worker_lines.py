"""The worker says what it did: one line per written ending on ``django_workqueue.jobs``
(``attempt/ending.py``, ``log_endings``), tracebacks only at DEBUG, and a summary that counts
attempts and the jobs they finished apart."""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest

from django_workqueue import task
from django_workqueue.exceptions import Snooze
from django_workqueue.models import Checkpoint
from django_workqueue.worker.runner import Worker
from django_workqueue.worker.shutdown import summary
from testproject.testapp.tasks import add, discard_me, flaky
from tests.support.database import fresh

pytestmark = pytest.mark.django_db(transaction=True)


@task(max_attempts=1)
def snoozes_long(context: Any) -> None:
    raise Snooze(3600)


@pytest.fixture
def drain() -> Callable[..., Worker]:
    def run(**options: Any) -> Worker:
        worker = Worker(burst=True, concurrency=1, poll_interval=0.05, **options)
        worker.run()
        return worker

    return run


def _lines(caplog: pytest.LogCaptureFixture, job_id: int) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records
        if r.name == "django_workqueue.jobs" and getattr(r, "job_id", None) == job_id
    ]  # fmt: skip


def test_each_ending_is_one_line_once_written(drain, caplog):
    caplog.set_level(logging.INFO, logger="django_workqueue")
    ok = add.enqueue(2, 3)
    retried = flaky.enqueue(succeed_on=2)
    discarded = discard_me.enqueue()
    snoozed = snoozes_long.enqueue()
    worker = drain()

    [line] = _lines(caplog, ok.pk)
    assert re.fullmatch(rf"#{ok.pk} {add.name} succeeded in \d+ (ms|s)", line.getMessage())
    assert line.levelno == logging.INFO
    assert (line.ending, line.attempt, line.task_name) == ("succeeded", 1, add.name)  # type: ignore[attr-defined]
    assert line.duration_ms >= 0  # type: ignore[attr-defined]

    first, second = _lines(caplog, retried.pk)
    assert first.levelno == logging.WARNING
    expected = f"#{retried.pk} {flaky.name} failed (attempt 1/4, retry in "
    assert first.getMessage().startswith(expected)
    assert first.error_type and first.traceback  # type: ignore[attr-defined]
    assert "Traceback" not in first.getMessage()
    assert second.getMessage().startswith(f"#{retried.pk} {flaky.name} succeeded")

    [line] = _lines(caplog, discarded.pk)
    assert line.levelno == logging.ERROR
    assert line.exc_info is not None and line.exc_info[0].__name__ == "Discard"
    assert first.exc_info is None
    assert line.getMessage().startswith(f"#{discarded.pk} {discard_me.name} discarded (attempt 1/5")

    [line] = _lines(caplog, snoozed.pk)
    assert line.getMessage() == f"#{snoozed.pk} {snoozes_long.name} snoozed for 3600 s"
    assert fresh(snoozed).status == "scheduled"

    # 5 attempts; 3 jobs finished; the retry and the snooze run again.
    assert worker.finished_count == 5
    assert summary(worker.finished_count, worker.completer.endings) == (
        "5 attempts: 3 jobs finished (1 discarded, 2 succeeded), "
        "2 to run again (1 retried, 1 snoozed)"
    )


@task(max_attempts=1)
def sleeps_a_day(context: Any) -> None:
    context.sleep(86400)


@task(max_attempts=1)
def waits_for_approval(context: Any) -> None:
    context.wait_for_signal("approve", timeout=3600)


@task(max_attempts=1)
def waits_for_ever(context: Any) -> None:
    context.wait_for_signal("payment")


def test_a_durable_sleep_or_wait_is_named_in_the_line_with_its_time(drain, caplog):
    caplog.set_level(logging.INFO, logger="django_workqueue")
    sleeper = sleeps_a_day.enqueue()
    waiter = waits_for_approval.enqueue()
    forever = waits_for_ever.enqueue()

    drain()

    wakes_at = Checkpoint.objects.get(job=sleeper).wakes_at
    times_out = Checkpoint.objects.get(job=waiter).wakes_at
    [line] = _lines(caplog, sleeper.pk)
    assert line.getMessage() == (
        f"#{sleeper.pk} {sleeps_a_day.name} sleeping until {_utc(wakes_at)}"
    )
    assert line.ending == "snoozed"  # type: ignore[attr-defined]
    [line] = _lines(caplog, waiter.pk)
    assert line.getMessage() == (
        f"#{waiter.pk} {waits_for_approval.name} waiting for signal 'approve' until "
        f"{_utc(times_out)}"
    )
    [line] = _lines(caplog, forever.pk)
    assert line.getMessage() == f"#{forever.pk} {waits_for_ever.name} waiting for signal 'payment'"


def _utc(when: Any) -> str:
    return when.astimezone(dt.UTC).isoformat(timespec="seconds")


def test_tracebacks_join_the_line_only_at_debug(drain, caplog):
    caplog.set_level(logging.DEBUG, logger="django_workqueue.jobs")
    job = flaky.enqueue(succeed_on=2)
    drain()
    first = _lines(caplog, job.pk)[0]
    assert first.levelno == logging.WARNING
    assert "Traceback (most recent call last)" in first.getMessage()


def test_no_line_is_made_when_the_logger_is_off(drain, caplog):
    caplog.set_level(logging.CRITICAL, logger="django_workqueue.jobs")
    job = add.enqueue(1, 1)
    worker = drain()
    assert fresh(job).status == "succeeded"
    assert not [r for r in caplog.records if r.name == "django_workqueue.jobs"]
    assert worker.completer.endings == {"succeeded": 1}  # counted all the same


def test_a_cancellation_requested_meanwhile_is_reported_as_cancelled():
    from django_workqueue.attempt.ending import ending_name
    from django_workqueue.outcomes import Outcome, OutcomeKind

    failed = Outcome(job_id=1, attempt=1, kind=OutcomeKind.RETRY, max_attempts=3, delay=5)
    assert ending_name(failed) == "retried"
    assert ending_name(failed, "cancelled") == "cancelled"


def test_an_atomic_tasks_success_is_reported_by_the_control_thread(drain, caplog):
    from testproject.testapp.tasks import atomic_effect

    caplog.set_level(logging.INFO, logger="django_workqueue")
    job = atomic_effect.enqueue(value="x")
    worker = drain()
    assert fresh(job).status == "succeeded"
    [line] = _lines(caplog, job.pk)
    assert line.getMessage().startswith(f"#{job.pk} {atomic_effect.name} succeeded in ")
    assert line.threadName == "MainThread"  # written by the control thread, not the slot
    assert worker.completer.endings == {"succeeded": 1}


def test_runworkers_own_handler_prints_a_lines_exception_only_at_v2():
    from django_workqueue.worker.logs import WorkerFormatter

    try:
        raise ValueError("boom")
    except ValueError as exc:
        exc_info = (ValueError, exc, exc.__traceback__)
    record = logging.LogRecord("django_workqueue.jobs", logging.ERROR, __file__, 1,
                               "#1 x failed", (), exc_info)  # fmt: skip
    assert "Traceback" not in WorkerFormatter(tracebacks=False).format(record)
    assert record.exc_info is exc_info  # left for the other handlers (error trackers)
    assert "Traceback" in WorkerFormatter(tracebacks=True).format(record)
    other = logging.LogRecord("django_workqueue.worker", logging.ERROR, __file__, 1,
                              "the worker failed", (), exc_info)  # fmt: skip
    assert "Traceback" in WorkerFormatter(tracebacks=False).format(other)
