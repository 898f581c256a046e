"""Workflows that grow while they run (``context.add``, ``context.continue_with``) and steps
whose body's writes commit with their success and their dependents' release (``atomic=True``).
"""

from __future__ import annotations

from typing import Any

import pytest

from django_workqueue import chain, group, operations
from django_workqueue.models import Job
from testproject.testapp.models import Effect
from testproject.testapp.tasks import atomic_effect, collect, double, echo, fan_out
from tests.support.database import fresh
from tests.support.tasks import Gate, adds_then_fails_once, atomic_gated_effect, gates, gather
from tests.support.waiting import wait_until
from tests.support.workflows import assert_counters_match_jobs, run_one_job, statuses, unmet_entry

pytestmark = pytest.mark.django_db(transaction=True)

DOUBLE = double.name


def children_of(wf: Any) -> list[Job]:
    return list(Job.objects.filter(workflow_id=wf.pk, task_name=DOUBLE).order_by("id"))


# --- context.add: fan-out joining the workflow -------------------------------------------------


def test_steps_added_at_run_time_join_the_workflow_and_the_next_step_waits_for_them(drain):
    wf = chain(fan_out.s(3), gather.s()).enqueue()
    parent, after = wf.jobs.order_by("id")

    run_one_job(drain)  # fan_out: its success writes the three steps

    children = children_of(wf)
    assert [job.args for job in children] == [[0], [1], [2]]
    assert statuses(parent, after, *children) == ["succeeded", "blocked", *["ready"] * 3]
    assert fresh(after).waiting_on == 3
    assert_counters_match_jobs(wf)
    drain()
    assert fresh(after).result == {
        "value": "added 3",  # the chain still passes the parent's own result
        "dependencies": [
            [fan_out.name, "succeeded", "added 3"],
            [DOUBLE, "succeeded", 0],
            [DOUBLE, "succeeded", 2],
            [DOUBLE, "succeeded", 4],
        ],
    }
    wf = assert_counters_match_jobs(wf)
    assert (wf.status, wf.total) == ("succeeded", 5)


def test_a_lone_job_that_fans_out_starts_a_workflow_holding_it_and_its_steps(drain):
    job = fan_out.enqueue(2)
    assert job.workflow_id is None
    drain()
    job = fresh(job)
    assert job.workflow_id is not None
    wf = assert_counters_match_jobs(job.workflow_id)
    assert (wf.status, wf.total, wf.result) == ("succeeded", 3, "added 2")


def test_steps_added_by_a_failed_attempt_are_not_written_and_the_next_attempt_adds_its_own(drain):
    wf = chain(adds_then_fails_once.s(2), gather.s()).enqueue()
    drain()
    parent = wf.jobs.get(task_name=adds_then_fails_once.name)
    assert (parent.status, parent.attempt, len(parent.errors)) == ("succeeded", 2, 1)
    assert [job.args for job in children_of(wf)] == [[0], [1]]  # one set: attempt 2's
    after = wf.jobs.get(task_name=gather.name)
    assert [d[0] for d in after.result["dependencies"]] == [parent.task_name, DOUBLE, DOUBLE]
    wf = assert_counters_match_jobs(wf)
    assert (wf.status, wf.total) == ("succeeded", 4)


# --- context.continue_with: the continuation takes the parent's place -------------------------


def test_a_continuation_chosen_at_run_time_waits_for_the_added_steps_and_gives_the_chain_its_result(
    drain,
):
    wf = chain(fan_out.s(3, then="collect"), gather.s()).enqueue()
    drain()
    continuation = wf.jobs.get(task_name=collect.name)
    assert continuation.result == [0, 2, 4]  # its dependencies: the added steps, in order
    after = wf.jobs.get(task_name=gather.name)
    assert after.result == {
        "value": [0, 2, 4],  # the continuation's result, not fan_out's
        "dependencies": [[collect.name, "succeeded", [0, 2, 4]]],
    }
    wf = assert_counters_match_jobs(wf)
    assert (wf.status, wf.result) == ("succeeded", after.result)


def test_a_continuation_replaces_its_parent_in_the_workflows_result(drain):
    wf = group(fan_out.s(2, then="collect"), echo.s(7)).enqueue()
    drain()
    wf = assert_counters_match_jobs(wf)
    assert (wf.status, wf.result) == ("succeeded", [[0, 2], 7])


# --- atomic=True steps ---------------------------------------------------------------------


def test_an_atomic_steps_effect_success_and_release_become_visible_together(background_worker):
    wf = chain(atomic_gated_effect.s("paid"), echo.s()).enqueue()
    step, after = wf.jobs.order_by("id")
    gate = gates[step.pk] = Gate()
    try:
        background_worker(concurrency=1)
        assert gate.reached.wait(20), "the atomic body did not start"
        # The body has written its Effect and is paused inside the completion transaction.
        assert not Effect.objects.filter(job_id=step.pk).exists()
        assert statuses(step, after) == ["running", "blocked"]
        gate.released.set()
        wait_until(lambda: statuses(after) == ["succeeded"], message="the dependent to run")
    finally:
        gate.released.set()
        gates.pop(step.pk, None)
    assert list(Effect.objects.filter(job_id=step.pk).values_list("value", flat=True)) == ["paid"]
    assert (fresh(step).status, fresh(after).result) == ("succeeded", "paid")
    assert_counters_match_jobs(wf)


def test_an_atomic_step_that_raises_commits_nothing_and_its_dependent_is_cancelled(drain):
    wf = chain(atomic_effect.using(max_attempts=1).s("lost", fail=True), echo.s()).enqueue()
    step, after = wf.jobs.order_by("id")
    run_one_job(drain)
    assert statuses(step, after) == ["failed", "cancelled"]
    assert not Effect.objects.exists()
    assert unmet_entry(after)["prerequisite"] == step.pk
    assert assert_counters_match_jobs(wf).status == "failed"


# --- a held dependent is a waiting dependent ----------------------------------------------------


def test_a_held_dependent_waits_for_the_steps_its_prerequisite_added_once_released(drain):
    wf = chain(fan_out.s(2), gather.s()).enqueue()
    parent, after = wf.jobs.order_by("id")
    operations.hold_job(after)

    run_one_job(drain)  # fan_out succeeds and adds two steps while its dependent is held

    children = children_of(wf)
    assert statuses(parent, after, *children) == ["succeeded", "held", "ready", "ready"]
    operations.release_job(after)
    # Released, it still waits for the added steps, as it would have without the hold.
    assert statuses(after) == ["blocked"]
    assert fresh(after).waiting_on == 2
    assert_counters_match_jobs(wf)
    drain()
    assert [d[1] for d in fresh(after).result["dependencies"]] == ["succeeded"] * 3
    assert assert_counters_match_jobs(wf).status == "succeeded"
