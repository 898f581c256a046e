"""Running a batch: one call, one outcome per job, classified as a single job's (no database)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest

from django_workqueue import AbortReason, Discard, JobContext, Retry, Task
from django_workqueue.attempt.batch import Batch, run_batch
from django_workqueue.attempt.lease import RunningJob
from django_workqueue.db import ClaimedJob
from django_workqueue.outcomes import OutcomeKind
from django_workqueue.states import Status
from testproject.testapp.tasks import batch_fails


def batch_task(func: Callable[[list[Any]], Any], **options: Any) -> Task[..., Any]:
    """An unregistered batch task calling ``func`` (max_attempts=3, backoff=0 by default)."""
    return Task(dataclasses.replace(batch_fails.spec, func=func, **options))


def member(
    job_id: int, *args: Any, attempt: int = 1, max_attempts: int = 3, charged: int = 0
) -> ClaimedJob:
    payload = json.dumps([list(args), {}])
    return ClaimedJob(
        job_id, "t", "default", 0, attempt, max_attempts, charged, 60, None, False, payload
    )


def batch(task: Task[..., Any], *jobs: ClaimedJob) -> Batch:
    members = [
        (job, RunningJob(JobContext(job, owner="w", driver=None)))  # type: ignore[arg-type]
        for job in jobs
    ]
    return Batch(task, members)


def run(task: Task[..., Any], *jobs: ClaimedJob) -> dict[int, Any]:
    return run_batch(batch(task, *jobs), None, None)  # type: ignore[arg-type]


def test_results_align_with_the_items_by_index():
    calls: list[list[Any]] = []

    def embed(items: list[Any]) -> list[Any]:
        calls.append(items)
        return [f"vector of {item}" for item in items]

    outcomes = run(batch_task(embed), member(1, "a"), member(2, "b"))

    assert calls == [["a", "b"]]
    assert {job_id: (o.kind, json.loads(o.result_json)) for job_id, o in outcomes.items()} == {
        1: (OutcomeKind.SUCCEEDED, "vector of a"),
        2: (OutcomeKind.SUCCEEDED, "vector of b"),
    }


@pytest.mark.parametrize(
    ("returned", "described"),
    [(["only one"], "a list of 1"), (("x", "y", "z"), "a tuple of 3"), (None, "None")],
)
def test_anything_but_one_result_per_item_discards_every_item(returned, described):
    outcomes = run(batch_task(lambda items: returned), member(1, "a"), member(2, "b"))

    for outcome in outcomes.values():
        assert outcome.kind == OutcomeKind.DISCARD and outcome.status == Status.FAILED
        assert outcome.error["type"] == "django_workqueue.worker.batch.BatchResultMismatch"
        assert "must return a list of 2 result(s)" in outcome.error["message"]
        assert f"it returned {described}." in outcome.error["message"]


def test_an_exception_is_each_jobs_failed_attempt_under_its_own_budget():
    def broken(items: list[Any]) -> list[Any]:
        raise ValueError("the model is down")

    outcomes = run(
        batch_task(broken),
        member(1, "a", attempt=1, max_attempts=1),
        member(2, "b", attempt=1, max_attempts=3),
        member(3, "c", attempt=4, max_attempts=3, charged=2),  # a claim given back once
    )

    assert [outcomes[n].status for n in (1, 2, 3)] == [Status.FAILED, Status.READY, Status.FAILED]
    assert {o.error["message"] for o in outcomes.values()} == {"the model is down"}


@pytest.mark.parametrize(
    ("raised", "kind"),
    [(Retry(delay=5), OutcomeKind.RETRY), (Discard("no"), OutcomeKind.DISCARD)],
)
def test_retry_and_discard_raised_by_the_call_apply_to_every_item(raised, kind):
    def body(items: list[Any]) -> list[Any]:
        raise raised

    outcomes = run(batch_task(body), member(1, "a"), member(2, "b"))

    assert [o.kind for o in outcomes.values()] == [kind, kind]


def test_a_member_whose_cancellation_was_requested_ends_cancelled_and_the_others_succeed():
    first, second = member(1, "a"), member(2, "b")
    running = batch(batch_task(lambda items: items), first, second)
    running.members[0][1].context.abort(AbortReason.CANCEL_REQUESTED)

    outcomes = run_batch(running, None, None)  # type: ignore[arg-type]

    assert (outcomes[1].kind, outcomes[2].kind) == (OutcomeKind.CANCELLED, OutcomeKind.SUCCEEDED)


def test_a_row_that_is_not_one_item_is_discarded_and_left_out_of_the_call():
    calls: list[list[Any]] = []

    def body(items: list[Any]) -> list[Any]:
        calls.append(items)
        return items

    outcomes = run(batch_task(body), member(1, "a", "extra"), member(2, "b"))

    assert calls == [["b"]]
    assert outcomes[1].kind == OutcomeKind.DISCARD
    assert "carries one item" in outcomes[1].error["message"]
    assert outcomes[2].kind == OutcomeKind.SUCCEEDED


def test_a_sync_call_that_overran_its_timeout_fails_every_item_as_a_timeout(monkeypatch):
    from django_workqueue.attempt import batch as module

    class Clock:  # the call starts at 100 s and returns at 100.5 s
        readings = [100.0, 100.5]

        @classmethod
        def monotonic(cls) -> float:
            return cls.readings.pop(0) if len(cls.readings) > 1 else cls.readings[0]

    monkeypatch.setattr(module, "time", Clock)

    outcomes = run(batch_task(lambda items: items, timeout=0.2), member(1, "a"))

    assert outcomes[1].error["type"] == "django_workqueue.exceptions.JobTimeout"
    assert outcomes[1].status == Status.READY  # retried, as any timeout
