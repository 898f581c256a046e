"""Operations on workflows and their jobs: finishing a job from outside any worker
(``complete_job``, ``fail_job``), cancelling a workflow, redriving a failed step (the workflow
resumes from it), and deleting a finished workflow.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.utils import timezone

from django_workqueue import chain, group, operations, task
from django_workqueue.context import AbortReason
from django_workqueue.db import driver_for
from django_workqueue.models import Dependency, Job, Workflow
from testproject.testapp.models import LedgerEntry
from testproject.testapp.tasks import describe_dependencies, echo, fail_step, flaky, record
from tests.support.database import (
    fresh,
    in_another_session,
    row_snapshot,
    sessions_waiting_for_a_lock,
)
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until
from tests.support.workflows import (
    FAILED_EXTERNALLY,
    assert_counters_match_jobs,
    statuses,
    unmet_entry,
)

pytestmark = pytest.mark.django_db(transaction=True)

#: What each body of ``answers_late`` saw, by job id.
seen: dict[int, dict[str, Any]] = {}


@task(max_attempts=1, lease_seconds=60)
def answers_late(context: Any, add: bool = False) -> str:
    """Runs until told to stop, then still returns (a late outcome its worker must not write,
    or a success that stands although cancellation was requested); ``add``: it adds a step."""
    if add:
        context.add(echo.s("added"))
    seen[context.job_id] = {}
    stopped = context.cancelled.wait(30)
    seen[context.job_id].update(stopped=stopped, reason=context.abort_reason)
    return "late result"


def in_status(status: str) -> Job:
    """A job in ``status``: blocked (on a job due in an hour), scheduled or ready."""
    if status == "blocked":
        job = echo.using(depends_on=[echo.using(delay=3600).enqueue()]).enqueue("own")
    else:
        job = echo.using(delay=3600 if status == "scheduled" else 0).enqueue("own")
    assert job.status == status
    return job


def dependent_of(job: Job) -> Job:
    dependent = describe_dependencies.using(depends_on=[job]).enqueue()
    assert dependent.status == "blocked"
    return dependent


# --- complete_job / fail_job on a waiting job ------------------------------------------------


@pytest.mark.parametrize("status", ["blocked", "scheduled", "ready"])
def test_complete_job_ends_a_waiting_job_with_the_result_and_releases_its_dependent(drain, status):
    job = in_status(status)
    dependent = dependent_of(job)

    done = operations.complete_job(job, {"approved_by": "ada"})

    assert (done.action, done.count) == ("completed", 1)
    job = fresh(job)
    assert (job.status, job.result, job.attempt) == ("succeeded", {"approved_by": "ada"}, 0)
    assert job.finished_at is not None
    assert statuses(dependent) == ["ready"]  # released in the same transaction
    assert_counters_match_jobs(job.workflow_id)
    drain()
    assert fresh(dependent).result == [[echo.name, "succeeded", {"approved_by": "ada"}]]
    assert fresh(job).result == {"approved_by": "ada"}  # the worker never ran it


@pytest.mark.parametrize("status", ["blocked", "scheduled", "ready"])
def test_fail_job_ends_a_waiting_job_with_the_reason_and_cancels_its_dependent(status):
    job = in_status(status)
    dependent = dependent_of(job)

    failed = operations.fail_job(job, "rejected by the manager")

    assert (failed.action, failed.count) == ("failed", 1)
    job = fresh(job)
    assert job.status == "failed" and job.finished_at is not None
    [error] = job.errors
    assert (error["type"], error["message"]) == (FAILED_EXTERNALLY, "rejected by the manager")
    assert unmet_entry(dependent)["prerequisite"] == job.pk
    assert_counters_match_jobs(job.workflow_id)


def test_a_completed_blocked_job_ignores_its_own_prerequisites_ending_later():
    job = in_status("blocked")
    [prerequisite] = Job.objects.filter(dependent_edges__job=job)
    operations.complete_job(job, "answered")
    before = row_snapshot(job)
    operations.complete_job(prerequisite, "late")
    assert row_snapshot(job) == before
    assert assert_counters_match_jobs(job.workflow_id).status == "succeeded"


@pytest.mark.parametrize("finish", [operations.complete_job, operations.fail_job])
@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
def test_finishing_a_finished_job_changes_nothing(drain, finish, status):
    job = {"succeeded": echo, "failed": fail_step, "cancelled": echo}[status].enqueue()
    if status == "cancelled":
        operations.cancel_job(job)
    else:
        drain()
    dependent = describe_dependencies.using(depends_on=[job], run_if="all_finished").enqueue()
    drain()
    before = row_snapshot(job), row_snapshot(dependent)

    outcome = finish(job, "again")

    assert (outcome.action, outcome.count) == ("unchanged", 0)
    assert status in outcome.message
    assert (row_snapshot(job), row_snapshot(dependent)) == before
    assert_counters_match_jobs(dependent.workflow_id)


def test_an_answer_before_the_delay_ends_replaces_the_delayed_default(drain):
    """The "auto-reject after a delay unless answered" pattern: a delayed job stands for the
    default answer; an answer from outside completes it first and releases what follows."""
    default = echo.using(delay=3600).enqueue("rejected: no answer in time")
    follow_up = describe_dependencies.using(depends_on=[default]).enqueue()
    drain()
    assert statuses(default, follow_up) == ["scheduled", "blocked"]

    operations.complete_job(default, "approved")
    drain()

    assert fresh(follow_up).result == [[echo.name, "succeeded", "approved"]]
    # When its time comes, the delayed job is not promoted: it has ended.
    later = timezone.now() + dt.timedelta(hours=2)
    assert driver_for("default").promote(100, now=later) == []
    assert (fresh(default).status, fresh(default).result) == ("succeeded", "approved")
    assert assert_counters_match_jobs(follow_up.workflow_id).status == "succeeded"


# --- complete_job / fail_job on a running job ------------------------------------------------


def start_running(background_worker: Callable[..., Any]) -> tuple[Job, Job, Any]:
    job = answers_late.enqueue()
    dependent = dependent_of(job)
    worker = background_worker(concurrency=2)
    wait_until(lambda: job.pk in seen, message="the body to start")
    return job, dependent, worker


def wait_for_worker(worker: Any, jobs: int) -> None:
    """Until the worker has handled ``jobs`` jobs (written, or refused, their outcomes)."""
    wait_until(lambda: worker.finished_count >= jobs, message=f"{jobs} job(s) to be handled")


@workqueue_settings(HEARTBEAT_INTERVAL=0.2)
def test_complete_job_on_a_running_job_keeps_the_external_result_over_the_workers(
    background_worker,
):
    job, dependent, worker = start_running(background_worker)

    assert operations.complete_job(job, "from outside").action == "completed"

    wait_for_worker(worker, 2)  # the late outcome, and the released dependent
    assert seen[job.pk] == {"stopped": True, "reason": AbortReason.COMPLETED_ELSEWHERE}
    job = fresh(job)
    assert (job.status, job.result, job.lease_owner) == ("succeeded", "from outside", None)
    assert fresh(dependent).result == [[answers_late.name, "succeeded", "from outside"]]
    assert assert_counters_match_jobs(job.workflow_id).status == "succeeded"


@workqueue_settings(HEARTBEAT_INTERVAL=0.2)
def test_fail_job_on_a_running_job_keeps_it_failed_whatever_its_worker_returns(background_worker):
    job, dependent, worker = start_running(background_worker)

    assert operations.fail_job(job, "timed out upstream").action == "failed"

    wait_for_worker(worker, 1)  # the late outcome (the dependent never runs)
    assert seen[job.pk]["reason"] == AbortReason.COMPLETED_ELSEWHERE
    job = fresh(job)
    assert (job.status, job.result) == ("failed", None)
    assert [e["type"] for e in job.errors] == [FAILED_EXTERNALLY]
    assert unmet_entry(dependent)["prerequisite"] == job.pk
    assert assert_counters_match_jobs(job.workflow_id).status == "failed"


@pytest.mark.postgres_only  # NOTIFY
@pytest.mark.parametrize("finish", ["complete_job", "fail_job"])
def test_finishing_a_running_job_stops_its_body_at_once_without_waiting_for_a_heartbeat(
    background_worker, finish
):
    # Heartbeats every 30 s: only the NOTIFY sent at commit can stop the body in time.
    with workqueue_settings(HEARTBEAT_INTERVAL=30.0):
        job, _, _ = start_running(background_worker)
        getattr(operations, finish)(job, "from outside")
        wait_until(lambda: "reason" in seen[job.pk], timeout=5, message="the abort")
    assert seen[job.pk]["reason"] == AbortReason.COMPLETED_ELSEWHERE


# --- cancel_workflow -----------------------------------------------------------------------


@workqueue_settings(HEARTBEAT_INTERVAL=0.2)
def test_cancel_workflow_cancels_waiting_jobs_and_asks_running_ones_to_stop(background_worker):
    wf = group(
        answers_late.s(),
        record.s("ready"),
        chain(record.using(delay=3600).s("scheduled"), record.s()),
    ).enqueue()
    running = wf.jobs.get(task_name=answers_late.name)
    waiting = list(wf.jobs.filter(task_name=record.name).order_by("id"))
    # One slot: the worker takes the first step inserted (answers_late) and nothing else.
    assert running.pk < min(job.pk for job in waiting)
    worker = background_worker(concurrency=1)
    wait_until(lambda: running.pk in seen, message="the running step to start")

    result = operations.cancel_workflow(wf)

    assert (result.action, result.count) == ("cancelled", 4)
    assert statuses(*waiting) == ["cancelled"] * 3
    assert fresh(running).cancel_requested_at is not None
    wait_until(lambda: "reason" in seen[running.pk], message="the running step to be told")
    assert seen[running.pk]["reason"] == AbortReason.CANCEL_REQUESTED
    wait_for_worker(worker, 1)
    assert not LedgerEntry.objects.filter(job_id__in=[job.pk for job in waiting]).exists()
    wf = assert_counters_match_jobs(wf)
    assert wf.cancel_requested_at is not None


@workqueue_settings(HEARTBEAT_INTERVAL=0.2)
def test_steps_added_by_a_running_job_of_a_cancelled_workflow_are_not_written(background_worker):
    wf = chain(answers_late.s(add=True), echo.s()).enqueue()
    running, after = wf.jobs.order_by("id")
    worker = background_worker(concurrency=1)
    wait_until(lambda: running.pk in seen, message="the running step to start")

    operations.cancel_workflow(wf)

    wait_for_worker(worker, 1)
    # Its success stands (it returned), but nothing it added joins the cancelled workflow.
    assert statuses(running, after) == ["succeeded", "cancelled"]
    assert list(wf.jobs.values_list("id", flat=True).order_by("id")) == [running.pk, after.pk]
    assert_counters_match_jobs(wf)


@pytest.mark.postgres_only  # row locks and deadlock detection
def test_cancel_workflow_and_a_workers_completion_of_one_of_its_steps_do_not_deadlock(
    background_worker, hold_row, caplog
):
    # The second step is of a queue the worker does not serve: released, it is not claimed
    # before the cancellation reaches it.
    wf = chain(echo.s(1), echo.using(queue="low").s()).enqueue()
    first, second = wf.jobs.order_by("id")
    release_second = hold_row(second.pk)  # so that the completion stops at the dependent
    background_worker(concurrency=1, queues=["default"])
    wait_until(lambda: sessions_waiting_for_a_lock() == 1, message="the completion to wait")
    # The worker's write holds the workflow's row (taken first): the cancellation waits for it.
    canceller, failures = in_another_session(lambda: operations.cancel_workflow(wf))
    wait_until(lambda: sessions_waiting_for_a_lock() == 2, message="the cancellation to wait")
    release_second.set()
    canceller.join(30)

    wait_until(lambda: statuses(first)[0] == "succeeded", message="the completion")
    # Either side may be the one PostgreSQL aborts: the operator's call, or the worker's write.
    assert failures == []
    assert [r.getMessage() for r in caplog.records if "deadlock" in r.getMessage()] == []
    assert statuses(second) == ["cancelled"]
    assert_counters_match_jobs(wf)


# --- redrive: the workflow resumes from the redriven step -------------------------------------


def test_redriving_a_failed_step_brings_back_the_steps_cancelled_because_of_it(drain):
    wf = chain(flaky.using(max_attempts=1).s(succeed_on=2), echo.s(), echo.s()).enqueue()
    step, second, third = wf.jobs.order_by("id")
    drain()
    assert statuses(step, second, third) == ["failed", "cancelled", "cancelled"]
    assert assert_counters_match_jobs(wf).status == "failed"

    assert operations.redrive([step]).count == 1

    assert statuses(step, second, third) == ["ready", "blocked", "blocked"]
    assert [fresh(job).waiting_on for job in (second, third)] == [1, 1]
    wf = assert_counters_match_jobs(wf)
    assert (wf.status, wf.finished_at, wf.result, wf.open) == ("running", None, None, 3)
    drain()
    wf = assert_counters_match_jobs(wf)
    assert (wf.status, wf.result) == ("succeeded", "succeeded on attempt 2")


def test_redrive_leaves_a_dependent_an_operator_cancelled_cancelled(drain):
    wf = chain(flaky.using(max_attempts=1).s(succeed_on=2), echo.s(), echo.s()).enqueue()
    step, second, third = wf.jobs.order_by("id")
    operations.cancel_job(third)  # by an operator, before anything failed
    drain()
    assert statuses(step, second, third) == ["failed", "cancelled", "cancelled"]

    operations.redrive([step])

    assert statuses(step, second, third) == ["ready", "blocked", "cancelled"]
    assert_counters_match_jobs(wf)
    drain()
    assert statuses(step, second, third) == ["succeeded", "succeeded", "cancelled"]
    assert assert_counters_match_jobs(wf).status == "cancelled"


def test_redrive_leaves_a_dependent_cancelled_while_another_prerequisite_still_failed(drain):
    wf = group(flaky.using(max_attempts=1).s(succeed_on=2), fail_step.s()).then(echo.s()).enqueue()
    callback = wf.jobs.get(task_name=echo.name)
    drain()
    [redriven] = wf.jobs.filter(task_name=flaky.name)

    operations.redrive([redriven])

    assert statuses(callback) == ["cancelled"]
    assert_counters_match_jobs(wf)
    drain()
    assert statuses(redriven, callback) == ["succeeded", "cancelled"]
    assert assert_counters_match_jobs(wf).status == "failed"


def test_redriving_a_step_failed_before_its_prerequisites_ended_waits_for_them_again(drain):
    prerequisite = echo.using(delay=3600).enqueue("later")
    step = describe_dependencies.using(depends_on=[prerequisite]).enqueue()
    operations.fail_job(step, "rejected")

    operations.redrive([step])
    drain()

    assert statuses(prerequisite, step) == ["scheduled", "blocked"]
    assert fresh(step).waiting_on == 1
    operations.retry_job(prerequisite)
    drain()
    assert fresh(step).result == [[echo.name, "succeeded", "later"]]


# --- deleting a workflow -------------------------------------------------------------------


def test_deleting_a_finished_workflow_deletes_its_jobs_and_edges_and_nothing_else(drain):
    doomed = chain(echo.s(1), group(echo.s(), echo.s())).enqueue()
    kept = chain(echo.s(2), echo.s()).enqueue()
    lone = echo.enqueue(3)
    drain()
    assert fresh_workflow(doomed).finished_at is not None
    kept_jobs = set(kept.jobs.values_list("id", flat=True))
    kept_edges = set(Dependency.objects.filter(job__workflow=kept).values_list("id", flat=True))
    assert len(kept_edges) == 1

    fresh_workflow(doomed).delete()

    assert not Workflow.objects.filter(pk=doomed.pk).exists()
    assert set(Job.objects.values_list("id", flat=True)) == kept_jobs | {lone.pk}
    assert set(Dependency.objects.values_list("id", flat=True)) == kept_edges
    assert assert_counters_match_jobs(kept).status == "succeeded"


def fresh_workflow(wf: Workflow) -> Workflow:
    wf.refresh_from_db()
    return wf


# --- operations racing a concurrent ending (PostgreSQL: row locks, READ COMMITTED) ------------


def ending_held_open(job: Job) -> tuple[threading.Event, threading.Thread, list[BaseException]]:
    """Complete ``job`` in another session's transaction, kept open until the returned event
    is set: the ending is written (its row locked) but not yet visible to other sessions."""
    from django.db import transaction

    written, commit = threading.Event(), threading.Event()

    def body() -> None:
        with transaction.atomic():
            operations.complete_job(job, "done elsewhere")
            written.set()
            assert commit.wait(30)

    thread, failures = in_another_session(body)
    assert written.wait(10)
    return commit, thread, failures


@pytest.mark.postgres_only  # a concurrent ending not yet committed: row locks decide
@pytest.mark.parametrize("waits_on", ["the redriven step", "a step it brings back"])
def test_redrive_counts_a_prerequisite_that_ends_while_it_runs(drain, waits_on):
    other = echo.using(delay=3600).enqueue("other")  # its ending races the redrive
    if waits_on == "the redriven step":
        step = echo.using(depends_on=[other]).enqueue("step")
        operations.fail_job(step, "rejected")  # failed while still waiting for `other`
        waiting = step
    else:
        step = echo.using(delay=3600).enqueue("step")
        waiting = echo.using(depends_on=[step, other]).enqueue("dependent")
        operations.fail_job(step, "rejected")
        assert statuses(waiting) == ["cancelled"]
    commit, ender, ender_failed = ending_held_open(other)

    redriver, redrive_failed = in_another_session(lambda: operations.redrive([step]))
    wait_until(
        lambda: not redriver.is_alive() or sessions_waiting_for_a_lock() == 1,
        message="the redrive to end or to wait for the ending's lock",
    )
    commit.set()
    ender.join(30)
    redriver.join(30)
    assert (ender_failed, redrive_failed) == ([], [])

    drain()
    # `other` ended (committed) around the redrive: counted once, never lost.
    assert statuses(other, step, waiting) == ["succeeded", "succeeded", "succeeded"]
    assert_counters_match_jobs(fresh(waiting).workflow_id)


proceed = threading.Event()


@task(max_attempts=1, lease_seconds=60)
def adds_when_told(context: Any) -> str:
    """Adds a step (due in an hour: no worker takes it), then returns when told to."""
    context.add(record.using(delay=3600).s("added"))
    assert proceed.wait(30)
    return "added one"


@pytest.fixture
def outcome_kept(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Set when a worker's write of outcomes kept one for later: its row, or its workflow's
    row, was held by another session (db/locking.py)."""
    from django_workqueue.workflow import release

    kept = threading.Event()
    original = release.record

    def record(*args: Any, **kwargs: Any) -> Any:
        recorded = original(*args, **kwargs)
        if recorded.busy:
            kept.set()
        return recorded

    monkeypatch.setattr(release, "record", record)
    return kept


@pytest.mark.postgres_only  # two sessions at once: the row locks decide (SQLite has one writer)
def test_a_step_finishing_while_cancel_workflow_waits_for_a_job_row_adds_nothing(
    background_worker, hold_row, outcome_kept
):
    proceed.clear()
    wf = group(echo.using(delay=3600).s("waiting"), adds_when_told.s()).enqueue()
    waiting, parent = wf.jobs.order_by("id")
    background_worker(concurrency=1)
    wait_until(lambda: statuses(parent) == ["running"], message="the parent to start")
    release_waiting = hold_row(waiting.pk)  # the cancellation stops at the first step's row
    canceller, cancel_failed = in_another_session(lambda: operations.cancel_workflow(wf))
    wait_until(lambda: sessions_waiting_for_a_lock() == 1, message="the cancellation to wait")

    proceed.set()  # the parent succeeds while the cancellation waits for the first step
    # The cancellation holds the workflow's row (the lock order, workflow/locks.py): the
    # parent's success is kept for the worker's next pass, not written before it.
    assert outcome_kept.wait(10)
    release_waiting.set()
    canceller.join(30)
    assert cancel_failed == []
    wait_until(lambda: statuses(parent) == ["succeeded"], message="the parent's success")

    # The workflow was marked cancelled before the parent's success was written: the
    # success stands, the step it added is not written.
    assert list(wf.jobs.order_by("id")) == [waiting, parent]
    assert statuses(waiting, parent) == ["cancelled", "succeeded"]
    assert_counters_match_jobs(wf)


def test_redrive_in_a_workflow_an_operator_cancelled_brings_no_step_back(drain):
    wf = chain(flaky.using(max_attempts=1).s(succeed_on=2), echo.s(), echo.s()).enqueue()
    step, second, third = wf.jobs.order_by("id")
    drain()
    assert statuses(step, second, third) == ["failed", "cancelled", "cancelled"]
    operations.cancel_workflow(wf)  # the operator gives the whole workflow up

    result = operations.redrive([step])

    assert result.count == 0
    assert "workflow was cancelled" in result.message
    assert statuses(step, second, third) == ["failed", "cancelled", "cancelled"]
    wf = assert_counters_match_jobs(wf)
    assert wf.status == "failed" and wf.finished_at is not None


@pytest.mark.postgres_only  # two sessions at once: the row locks decide (SQLite has one writer)
def test_cancel_workflow_cancels_steps_added_by_its_only_running_step_as_it_finishes(
    background_worker, hold_row, outcome_kept
):
    """The running step is the workflow's only open job: it ends, adding a step, while the
    cancellation waits. Either the step is written and then cancelled, or it is not written."""
    proceed.clear()
    wf = chain(adds_when_told.s()).enqueue()
    [parent] = wf.jobs.all()
    background_worker(concurrency=1)
    wait_until(lambda: statuses(parent) == ["running"], message="the parent to start")
    release_workflow = hold_row(wf.pk, Workflow)  # both sides meet at the workflow's row
    proceed.set()  # the parent succeeds: its completion keeps it while the row is held
    assert outcome_kept.wait(10)
    canceller, cancel_failed = in_another_session(lambda: operations.cancel_workflow(wf))
    wait_until(lambda: sessions_waiting_for_a_lock() == 1, message="the cancellation to wait")

    release_workflow.set()
    canceller.join(30)
    assert cancel_failed == []
    wait_until(lambda: statuses(parent) == ["succeeded"], message="the completion")

    added = list(wf.jobs.exclude(pk=parent.pk))
    assert [job.status for job in added] in ([], ["cancelled"])  # never left to run
    wf = assert_counters_match_jobs(wf)
    assert wf.cancel_requested_at is not None


# --- nothing brings back a step of a cancelled workflow ----------------------------------------

BRING_BACK: dict[str, Callable[[Job], Any]] = {
    "redrive": lambda job: operations.redrive([job]),
    "retry_job": operations.retry_job,
    "release_job": operations.release_job,
    "complete_job": lambda job: operations.complete_job(job, "late answer"),
    "fail_job": lambda job: operations.fail_job(job, "late answer"),
}


@pytest.mark.parametrize("operation", sorted(BRING_BACK))
@pytest.mark.parametrize("target", ["the failed step", "a step cancelled because of it"])
def test_no_operation_brings_back_a_step_of_a_cancelled_workflow(drain, operation, target):
    wf = chain(flaky.using(max_attempts=1).s(succeed_on=2), echo.s(), echo.s()).enqueue()
    step, second, third = wf.jobs.order_by("id")
    drain()
    operations.cancel_workflow(wf)  # the operator gives the whole workflow up
    before = statuses(step, second, third)
    assert before == ["failed", "cancelled", "cancelled"]

    result = BRING_BACK[operation](step if target == "the failed step" else second)

    assert result.count == 0, result
    drain()
    assert statuses(step, second, third) == before
    wf = assert_counters_match_jobs(wf)
    assert wf.status == "failed" and wf.cancel_requested_at is not None


@pytest.mark.postgres_only  # two sessions at once: the row locks decide (SQLite has one writer)
def test_a_redrive_and_a_cancellation_of_its_workflow_at_once_leave_nothing_to_run(drain, hold_row):
    first = echo.enqueue("first")
    step = flaky.using(max_attempts=1, depends_on=[first]).enqueue(succeed_on=2)
    after = echo.using(depends_on=[step]).enqueue("after")
    drain()
    assert statuses(first, step, after) == ["succeeded", "failed", "cancelled"]
    release_first = hold_row(first.pk)  # the redrive stops at its step's prerequisite
    redriver, redrive_failed = in_another_session(lambda: operations.redrive([step]))
    wait_until(lambda: sessions_waiting_for_a_lock() == 1, message="the redrive to wait")
    # The redrive holds the workflow's row (the lock order, workflow/locks.py): the
    # cancellation waits for it, then cancels what it brought back.
    workflow_id = fresh(step).workflow_id
    canceller, cancel_failed = in_another_session(lambda: operations.cancel_workflow(workflow_id))
    wait_until(lambda: sessions_waiting_for_a_lock() == 2, message="the cancellation to wait")

    release_first.set()
    redriver.join(30)
    canceller.join(30)

    assert (redrive_failed, cancel_failed) == ([], [])
    assert statuses(first, step, after) == ["succeeded", "cancelled", "cancelled"]
    assert_counters_match_jobs(workflow_id)


# --- the lock order (workflow/locks.py) --------------------------------------------------------

fan_out_now, side_ends_now = threading.Event(), threading.Event()


@task(max_attempts=1, lease_seconds=60, queue="mail")
def fans_out_when_told(context: Any) -> str:
    context.add(record.using(delay=3600).s("child"))  # due in an hour: no worker takes it
    assert fan_out_now.wait(30)
    return "fanned out"


@task(max_attempts=1, lease_seconds=60, queue="reports")
def ends_when_told() -> str:
    assert side_ends_now.wait(30)
    return "side"


@pytest.mark.postgres_only  # two workers' completions at once: the row locks decide
def test_a_step_fanning_out_and_its_sibling_ending_at_once_take_their_locks_in_one_order(
    background_worker, hold_row, caplog, outcome_kept
):
    """Both completions take the workflow's row first (``SKIP LOCKED``, the lock order of
    workflow/locks.py), then their own row, then the dependent they share. The sibling, first,
    holds the workflow's row while it waits for the dependent's; the fan-out finds the
    workflow's row held and keeps its outcome for its next pass, holding nothing. With the
    dependent's row taken before the workflow's (as the fan-out once did, when workers took
    job rows first), one would hold the dependent waiting for the workflow while the other
    held the workflow waiting for the dependent: a deadlock."""
    fan_out_now.clear()
    side_ends_now.clear()
    wf = group(fans_out_when_told.s(), ends_when_told.s()).then(echo.using(queue="low").s())
    wf = wf.enqueue()
    fan, side, merge = wf.jobs.order_by("id")
    background_worker(concurrency=1, queues=["mail"])
    background_worker(concurrency=1, queues=["reports"])
    wait_until(lambda: statuses(fan, side) == ["running", "running"], message="both to start")
    release_merge = hold_row(merge.pk)  # both completions meet at the dependent's row
    side_ends_now.set()  # the sibling's count-down waits for the dependent first
    wait_until(lambda: sessions_waiting_for_a_lock() == 1, message="the sibling to wait")
    fan_out_now.set()
    assert outcome_kept.wait(10)  # the fan-out: the workflow's row is the sibling's
    assert sessions_waiting_for_a_lock() == 1

    release_merge.set()

    wait_until(lambda: statuses(fan, side) == ["succeeded", "succeeded"], message="both")
    assert [r.getMessage() for r in caplog.records if "flush failed" in r.getMessage()] == []
    [child] = wf.jobs.exclude(pk__in=[fan.pk, side.pk, merge.pk])
    merge.refresh_from_db()
    assert (merge.status, merge.waiting_on) == ("blocked", 1)  # waits for the child
    assert statuses(child) == ["scheduled"]
    assert_counters_match_jobs(wf)
