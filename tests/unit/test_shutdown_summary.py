"""The line a stopping worker ends with (``shutdown.summary``): attempts and the jobs they
finished counted apart, from the completer's counts by ending."""

from __future__ import annotations

from django_workqueue.worker.shutdown import summary


def test_the_summary_counts_attempts_and_the_jobs_they_finished_apart() -> None:
    endings = {"succeeded": 6, "dead-lettered": 1, "retried": 2, "snoozed": 0}
    assert summary(9, endings) == (
        "9 attempts: 7 jobs finished (1 dead-lettered, 6 succeeded), 2 to run again (2 retried)"
    )


def test_one_attempt_and_nothing_finished_read_in_the_singular_and_plain() -> None:
    assert summary(1, {"retried": 1}) == "1 attempt: 0 jobs finished, 1 to run again (1 retried)"
    assert summary(0, {}) == "0 attempts: 0 jobs finished"
