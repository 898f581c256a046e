"""``JobContext``: abort reasons and what a lost lease means to the task (no database)."""

from __future__ import annotations

from typing import Any

import pytest

from django_workqueue import AbortReason, JobCancelled, JobContext
from django_workqueue.db import ClaimedJob


def context() -> JobContext:
    job = ClaimedJob(1, "t", "default", 0, 1, 3, 0, 60, None, False, "[[], {}]")
    reports: list[Any] = []
    return JobContext(job, owner="w", driver=None, on_progress=reports.append)  # type: ignore[arg-type]


def test_the_first_reason_stays_and_is_what_the_task_is_told():
    ctx = context()
    assert ctx.abort(AbortReason.CANCEL_REQUESTED) is True
    assert ctx.abort(AbortReason.TIMEOUT) is False
    assert ctx.cancelled.is_set() and ctx.abort_reason == AbortReason.CANCEL_REQUESTED
    with pytest.raises(JobCancelled) as raised:
        ctx.raise_if_cancelled()
    assert raised.value.reason == AbortReason.CANCEL_REQUESTED


@pytest.mark.parametrize(
    "lost", [AbortReason.LEASE_LOST, AbortReason.COMPLETED_ELSEWHERE, AbortReason.DELETED]
)
def test_a_lease_lost_after_another_reason_still_counts_as_lost(lost):
    ctx = context()
    ctx.abort(AbortReason.CANCEL_REQUESTED)
    assert ctx.lease_lost is False and ctx.set_progress(1) is True
    ctx.abort(lost)
    assert ctx.abort_reason == AbortReason.CANCEL_REQUESTED  # still the first reason
    assert ctx.lease_lost is True
    assert ctx.set_progress(2) is False  # the report can no longer be written


def test_shutdown_and_timeout_do_not_mean_the_lease_is_lost():
    for reason in (AbortReason.SHUTDOWN, AbortReason.TIMEOUT):
        ctx = context()
        ctx.abort(reason)
        assert ctx.lease_lost is False
