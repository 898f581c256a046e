"""Compositions: the values that chains, groups and chords pass along, a dependency graph built
with ``depends_on``, the workflow's counters while it runs, and what enqueue refuses.

The steps are run by a real (burst) worker in this process and the values read back from the
rows, so a value that took a wrong path shows up as a wrong result.
"""

from __future__ import annotations

import pytest
from django.db import transaction

from django_workqueue import InvalidArguments, PayloadNotJSON, chain, group
from django_workqueue.exceptions import InvalidOption
from django_workqueue.models import Dependency, Job, Workflow
from testproject.testapp.tasks import add, describe_dependencies, double, echo, fail_step, total
from tests.support.database import fresh
from tests.support.workflows import assert_counters_match_jobs, run_one_job, statuses

pytestmark = pytest.mark.django_db(transaction=True)


# --- values ------------------------------------------------------------------------------------


def test_a_chain_passes_each_steps_result_to_the_next_as_its_first_argument(drain):
    wf = chain(add.s(1, 2), double.s(), add.s(10)).enqueue()
    drain()
    wf.refresh_from_db()
    assert (wf.status, wf.result) == ("succeeded", 16)  # (1 + 2) * 2 + 10
    assert sorted(wf.jobs.values_list("result", flat=True)) == [3, 6, 16]
    # The previous value is passed at run time, never stored in the step's arguments.
    assert sorted(wf.jobs.values_list("args", flat=True), key=len) == [[], [10], [1, 2]]


def test_a_groups_value_lists_its_members_results_in_declared_order(drain):
    wf = group(echo.s("a"), double.s(2), echo.s("c")).enqueue()
    # Steps of one task are inserted together, so ids do not follow the declared order here:
    # both echo steps come before double(2). The result must follow the declaration anyway.
    ids = {tuple(args): pk for args, pk in wf.jobs.values_list("args", "id")}
    assert ids[("c",)] < ids[(2,)]
    drain()
    wf.refresh_from_db()
    assert (wf.status, wf.result) == ("succeeded", ["a", 4, "c"])


def test_a_chord_callback_receives_the_list_of_results_before_its_own_arguments(drain):
    wf = group(double.s(1), echo.s(10), double.s(2)).then(total.s(100)).enqueue()
    drain()
    wf.refresh_from_db()
    assert wf.result == 116  # total([2, 10, 4], extra=100)
    [callback] = wf.jobs.filter(task_name=total.name)
    assert callback.args == [100]


def test_a_chord_callback_receives_exactly_the_groups_list(drain):
    wf = group(double.s(1), echo.s(10), double.s(2)).then(echo.s()).enqueue()
    drain()
    assert fresh_workflow(wf).result == [2, 10, 4]


def test_chains_inside_groups_inside_a_chain_receive_and_give_nested_values(drain):
    wf = chain(
        echo.s(1),
        group(
            chain(double.s(), double.s()),  # 1 -> 2 -> 4
            echo.s(),  # 1
            group(double.s(), chain(echo.s(), add.s(5))),  # [2, 6]
        ),
        echo.s(),
    ).enqueue()
    drain()
    assert fresh_workflow(wf).result == [4, 1, [2, 6]]


def test_a_workflow_ending_in_nested_groups_has_a_result_of_the_same_shape(drain):
    wf = chain(
        echo.s(3), group(double.s(), group(echo.s(), chain(double.s(), double.s())))
    ).enqueue()
    drain()
    wf = fresh_workflow(wf)
    assert (wf.status, wf.result) == ("succeeded", [6, [3, 12]])
    assert len(wf.output) == 2 and len(wf.output[1]) == 2  # job ids, nested the same way


def test_an_empty_group_gives_its_callback_an_empty_list(drain):
    wf = group().then(echo.s()).enqueue()
    assert wf.counts["total"] == 1
    drain()
    assert fresh_workflow(wf).result == []


def test_an_empty_group_alone_is_a_workflow_that_has_already_succeeded_with_an_empty_list():
    wf = group().enqueue()
    assert (wf.status, wf.result, wf.total, wf.open) == ("succeeded", [], 0, 0)
    assert wf.finished_at is not None


def fresh_workflow(wf: Workflow) -> Workflow:
    wf.refresh_from_db()
    return wf


# --- a dependency graph built with depends_on ------------------------------------------------


def test_a_diamond_runs_each_job_after_its_prerequisites_and_hands_them_their_results(drain):
    a = echo.enqueue("a")
    b = echo.using(depends_on=[a]).enqueue("b")
    c = describe_dependencies.using(depends_on=[a]).enqueue()
    d = describe_dependencies.using(depends_on=[c, b]).enqueue()  # declared order: c, then b
    workflow_ids = {fresh(job).workflow_id for job in (a, b, c, d)}
    assert len(workflow_ids) == 1 and None not in workflow_ids
    wf = Workflow.objects.get(pk=workflow_ids.pop())
    assert statuses(a, b, c, d) == ["ready", "blocked", "blocked", "blocked"]
    assert_counters_match_jobs(wf)

    run_one_job(drain)  # a
    assert statuses(a, b, c, d) == ["succeeded", "ready", "ready", "blocked"]
    run_one_job(drain)  # b or c
    assert statuses(d) == ["blocked"]
    assert fresh(d).waiting_on == 1
    run_one_job(drain)  # the other one
    assert statuses(d) == ["ready"]
    drain()

    assert fresh(c).result == [[echo.name, "succeeded", "a"]]
    assert fresh(d).result == [
        [describe_dependencies.name, "succeeded", [[echo.name, "succeeded", "a"]]],
        [echo.name, "succeeded", "b"],
    ]
    wf = assert_counters_match_jobs(wf)
    assert wf.status == "succeeded"


# --- the counters ------------------------------------------------------------------------------


def test_the_counters_equal_the_counts_of_the_jobs_statuses_after_every_step(drain):
    wf = (
        group(chain(echo.s(1), double.s(), double.s()), fail_step.s(), echo.s(2))
        .then(total.s())
        .enqueue()
    )
    assert wf.counts == {"total": 6, "open": 6, "succeeded": 0, "failed": 0, "cancelled": 0}
    for _ in range(5):  # the callback never runs
        run_one_job(drain)
        assert_counters_match_jobs(wf)
    wf = assert_counters_match_jobs(wf)
    assert wf.counts == {"total": 6, "open": 0, "succeeded": 4, "failed": 1, "cancelled": 1}
    assert (wf.status, wf.result) == ("failed", None)  # the callback was cancelled


def test_a_workflow_that_succeeds_records_its_result_and_finished_at_with_its_last_job(drain):
    wf = chain(add.s(2, 3), double.s()).enqueue()
    run_one_job(drain)
    wf = assert_counters_match_jobs(wf)
    assert (wf.status, wf.finished_at, wf.result) == ("running", None, None)
    run_one_job(drain)
    wf = assert_counters_match_jobs(wf)
    assert (wf.status, wf.result) == ("succeeded", 10)
    assert wf.finished_at is not None


# --- what enqueue refuses: nothing is written -------------------------------------------------


def nothing_written() -> tuple[int, int, int]:
    return Job.objects.count(), Workflow.objects.count(), Dependency.objects.count()


@pytest.mark.parametrize(
    "build",
    [
        lambda: chain(echo.s(1), double.s(2)),  # double receives the previous value and 2
        lambda: chain(echo.s(1), group(echo.s(), add.s())),  # add(previous) lacks b
        lambda: group(echo.s(1), double.s()),  # a group's first steps receive nothing
        lambda: chain(echo.s(1), echo.s(), echo.s(unknown=1)),
    ],
    ids=["too-many", "too-few-in-a-group", "first-step-receives-nothing", "unknown-keyword"],
)
def test_a_step_with_arguments_that_do_not_fit_its_task_is_refused_and_nothing_written(build):
    with pytest.raises(InvalidArguments):
        build().enqueue()
    assert nothing_written() == (0, 0, 0)


def test_a_step_with_arguments_that_are_not_json_is_refused_and_nothing_written():
    with pytest.raises(PayloadNotJSON):
        chain(echo.s(1), echo.s(), echo.s({1, 2})).enqueue()
    assert nothing_written() == (0, 0, 0)


def test_a_unique_key_in_a_composition_is_refused_and_nothing_written():
    with pytest.raises(InvalidOption, match="unique_key"):
        chain(echo.s(1), echo.using(unique_key="once").s()).enqueue()
    assert nothing_written() == (0, 0, 0)


def test_a_bad_run_if_in_a_composition_is_refused_and_nothing_written():
    with pytest.raises(InvalidOption, match="run_if"):
        group(echo.s(1), echo.using(run_if="sometimes").s(2)).enqueue()
    assert nothing_written() == (0, 0, 0)


def test_a_step_depending_on_a_missing_job_is_refused_and_nothing_written():
    # Found only while writing (the prerequisites are locked then): the rows written before
    # the check are rolled back with it.
    kept = echo.enqueue("kept")
    with pytest.raises(InvalidOption, match=str(kept.pk + 1000)):
        chain(echo.s(1), echo.using(depends_on=[kept, kept.pk + 1000]).s()).enqueue()
    assert nothing_written() == (1, 0, 0)
    assert fresh(kept).workflow_id is None


def test_a_workflow_enqueued_in_a_transaction_that_rolls_back_leaves_nothing():
    class Abort(Exception):
        pass

    with pytest.raises(Abort), transaction.atomic():
        wf = group(echo.s(1), echo.s(2)).then(total.s()).enqueue()
        assert Job.objects.filter(workflow=wf).count() == 3  # written, in the transaction
        raise Abort
    assert nothing_written() == (0, 0, 0)
