"""Run conditions and ``depends_on``: when a dependent runs or is cancelled, what its error entry
says, how a cancellation travels down the graph, and what ``depends_on`` does with jobs that have
already ended, jobs outside any workflow, and ids that do not exist.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import transaction

from django_workqueue import chain, group, operations
from django_workqueue.db import Outcome, OutcomeKind, driver_for
from django_workqueue.exceptions import InvalidOption
from django_workqueue.maintenance import reaper
from django_workqueue.models import Dependency, Job, Workflow
from django_workqueue.workflow import release
from testproject.testapp.tasks import describe_dependencies, discard_step, double, echo, fail_step
from tests.support.database import db_now, fresh
from tests.support.factories import JobFactory
from tests.support.tasks import gather
from tests.support.workflows import assert_counters_match_jobs, run_one_job, statuses, unmet_entry

pytestmark = pytest.mark.django_db(transaction=True)


ENDINGS = ["failed", "cancelled", "discarded"]
BAD_STATUS = {"failed": "failed", "discarded": "failed", "cancelled": "cancelled"}


def will_not_succeed(how: str) -> Job:
    """A prerequisite that will fail in a worker, be discarded in a worker, or wait until the
    test cancels it (``end``)."""
    if how == "failed":
        return fail_step.enqueue()
    if how == "discarded":
        return discard_step.enqueue()
    return echo.using(delay=3600).enqueue("never")


def end(how: str, job: Job, drain) -> None:
    if how == "cancelled":
        assert operations.cancel_job(job).action == "cancelled"
    else:
        drain()


def waiting_prerequisite() -> Job:
    """A prerequisite that stays open until the test makes it due (``retry_job``)."""
    return echo.using(delay=3600).enqueue("later")


@pytest.mark.parametrize("how", ENDINGS)
def test_all_succeeded_cancels_the_dependent_as_soon_as_one_prerequisite_does_not_succeed(
    drain, how
):
    later = waiting_prerequisite()
    bad = will_not_succeed(how)
    dependent = describe_dependencies.using(depends_on=[later, bad]).enqueue()
    assert dependent.run_condition == "all_succeeded"  # the default
    end(how, bad, drain)
    assert statuses(later, bad) == ["scheduled", BAD_STATUS[how]]
    entry = unmet_entry(dependent)  # while the other prerequisite is still open
    assert entry["prerequisite"] == bad.pk
    assert f"prerequisite job {bad.pk} (" in entry["message"]
    assert BAD_STATUS[how] in entry["message"]
    assert fresh(dependent).finished_at is not None
    assert_counters_match_jobs(fresh(dependent).workflow_id)


@pytest.mark.parametrize("run_if", ["all_finished", "any_succeeded"])
@pytest.mark.parametrize("how", ENDINGS)
def test_a_dependent_that_tolerates_a_prerequisite_not_succeeding_runs_once_all_have_ended(
    drain, run_if, how
):
    later = waiting_prerequisite()
    bad = will_not_succeed(how)
    dependent = describe_dependencies.using(depends_on=[later, bad], run_if=run_if).enqueue()
    end(how, bad, drain)
    assert statuses(bad, dependent) == [BAD_STATUS[how], "blocked"]  # still waits for `later`
    assert fresh(dependent).waiting_on == 1

    operations.retry_job(later)  # due now
    drain()

    assert statuses(later, dependent) == ["succeeded", "succeeded"]
    assert fresh(dependent).result == [
        [echo.name, "succeeded", "later"],
        [bad.task_name, BAD_STATUS[how], None],
    ]
    assert_counters_match_jobs(fresh(dependent).workflow_id)


@pytest.mark.parametrize("how", ENDINGS)
def test_any_succeeded_cancels_the_dependent_when_none_succeeded(drain, how):
    first, last = fail_step.enqueue(), will_not_succeed(how)
    dependent = echo.using(depends_on=[first, last], run_if="any_succeeded").enqueue()
    drain()
    if how == "cancelled":
        assert statuses(first, dependent) == ["failed", "blocked"]  # one is still open
        end(how, last, drain)
    entry = unmet_entry(dependent)
    # The prerequisite whose ending decided (one worker may have ended both together).
    expected = {last.pk} if how == "cancelled" else {first.pk, last.pk}
    assert entry["prerequisite"] in expected
    assert "none of its prerequisites succeeded" in entry["message"]
    assert_counters_match_jobs(fresh(dependent).workflow_id)


def test_all_finished_runs_the_dependent_even_when_every_prerequisite_failed(drain):
    first, second = fail_step.enqueue(), discard_step.enqueue()
    dependent = describe_dependencies.using(
        depends_on=[first, second], run_if="all_finished"
    ).enqueue()
    drain()
    assert fresh(dependent).result == [
        [fail_step.name, "failed", None],
        [discard_step.name, "failed", None],
    ]


def test_a_chord_callback_that_runs_if_all_finished_receives_none_for_a_member_that_failed(drain):
    wf = group(echo.s(1), fail_step.s(), echo.s(3)).then(gather.using(run_if="all_finished").s())
    wf = wf.enqueue()
    drain()
    callback = wf.jobs.get(task_name=gather.name)
    assert callback.result["value"] == [1, None, 3]
    assert [d[1] for d in callback.result["dependencies"]] == ["succeeded", "failed", "succeeded"]
    assert assert_counters_match_jobs(wf).status == "failed"


def test_a_released_dependent_whose_run_after_is_later_is_scheduled_not_ready():
    prerequisite = echo.enqueue("now")
    dependent = echo.using(depends_on=[prerequisite], delay=3600).enqueue("later")
    assert dependent.status == "blocked"
    operations.complete_job(prerequisite)
    assert statuses(dependent) == ["scheduled"]
    assert (fresh(dependent).run_after - db_now()) > dt.timedelta(minutes=50)


# --- propagation ---------------------------------------------------------------------------


def test_a_failed_step_cancels_every_later_step_of_its_chain_in_the_same_transaction():
    wf = chain(echo.s(1), echo.s(), echo.s(), echo.s()).enqueue()
    a, b, c, d = wf.jobs.order_by("id")
    operations.fail_job(a, "rejected")
    # Nothing else ran: the ending of `a` alone cancelled the rest of the chain.
    assert statuses(a, b, c, d) == ["failed", "cancelled", "cancelled", "cancelled"]
    for job, prerequisite in ((b, a), (c, b), (d, c)):
        assert unmet_entry(job)["prerequisite"] == prerequisite.pk
    wf = assert_counters_match_jobs(wf)
    assert wf.counts == {"total": 4, "open": 0, "succeeded": 0, "failed": 1, "cancelled": 3}


def test_a_step_failing_in_a_worker_cancels_the_rest_of_its_chain_before_another_step_runs(
    drain,
):
    wf = chain(fail_step.s(), echo.s(), echo.s(), echo.s()).enqueue()
    run_one_job(drain)
    a, b, c, d = wf.jobs.order_by("id")
    assert statuses(a, b, c, d) == ["failed", "cancelled", "cancelled", "cancelled"]
    assert unmet_entry(d)["prerequisite"] == c.pk
    assert assert_counters_match_jobs(wf).status == "failed"


def test_a_step_whose_last_crash_was_lost_with_its_worker_cancels_its_dependents():
    wf = chain(echo.using(max_attempts=1).s(1), echo.s(), echo.s()).enqueue()
    a, b, c = wf.jobs.order_by("id")
    Job.objects.filter(pk=a.pk).update(crashes_charged=2)  # two workers died under it before
    [claimed] = driver_for("default").claim(["default"], 1, "a-worker-that-died")
    assert claimed.id == a.pk
    with transaction.atomic():  # its lease runs out, and the reaper finds its crashes spent
        Job.objects.filter(pk=a.pk).update(lease_expires_at=dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
        assert reaper.run_once() == 1
    assert statuses(a, b, c) == ["failed", "cancelled", "cancelled"]
    assert unmet_entry(c)["prerequisite"] == b.pk
    assert assert_counters_match_jobs(wf).status == "failed"


def test_cancelling_a_waiting_step_cancels_its_dependents_but_not_its_prerequisites():
    wf = chain(echo.s(1), echo.s(), echo.s()).enqueue()
    a, b, c = wf.jobs.order_by("id")
    operations.cancel_job(b)
    assert statuses(a, b, c) == ["ready", "cancelled", "cancelled"]
    assert fresh(b).errors == []  # an operator's cancellation is not an unmet condition
    assert unmet_entry(c)["prerequisite"] == b.pk
    assert_counters_match_jobs(wf)


# --- depends_on --------------------------------------------------------------------------------


def test_depends_on_a_job_that_already_succeeded_releases_the_new_job_at_once(drain):
    done = echo.enqueue("done")
    drain()
    dependent = describe_dependencies.using(depends_on=[done]).enqueue()
    assert (dependent.status, dependent.waiting_on) == ("ready", 0)
    drain()
    assert fresh(dependent).result == [[echo.name, "succeeded", "done"]]
    assert fresh(done).workflow_id is None  # a finished job is not adopted
    wf = assert_counters_match_jobs(dependent.workflow_id)
    assert wf.counts == {"total": 1, "open": 0, "succeeded": 1, "failed": 0, "cancelled": 0}


def test_depends_on_a_job_that_already_failed_cancels_the_new_job_at_once(drain):
    failed = fail_step.enqueue()
    drain()
    dependent = echo.using(depends_on=[failed]).enqueue()
    assert dependent.status == "cancelled"
    assert unmet_entry(dependent)["prerequisite"] == failed.pk
    assert assert_counters_match_jobs(dependent.workflow_id).status == "cancelled"


def test_depends_on_an_open_job_outside_any_workflow_adopts_it_into_the_new_workflow(drain):
    lone = echo.enqueue("lone")
    dependent = describe_dependencies.using(depends_on=[lone]).enqueue()
    assert dependent.status == "blocked"
    assert fresh(lone).workflow_id == dependent.workflow_id
    wf = assert_counters_match_jobs(dependent.workflow_id)
    assert wf.counts["total"] == 2
    drain()
    assert fresh(dependent).result == [[echo.name, "succeeded", "lone"]]
    assert assert_counters_match_jobs(wf).status == "succeeded"


def test_depends_on_a_running_job_outside_any_workflow_adopts_it_and_its_ending_counts():
    running = JobFactory(running=True, task_name=echo.name, args=["ran"])
    dependent = describe_dependencies.using(depends_on=[running]).enqueue()
    assert fresh(running).workflow_id == dependent.workflow_id
    # Its worker records the success as it would for any job (it claimed it before adoption).
    success = Outcome(
        job_id=running.pk, attempt=1, kind=OutcomeKind.SUCCEEDED, max_attempts=3,
        result_json='"ran"',
    )  # fmt: skip
    recorded = release.record(driver_for("default"), "worker-a", [success])
    assert recorded.written == {(running.pk, 1)}
    assert statuses(running, dependent) == ["succeeded", "ready"]
    assert_counters_match_jobs(dependent.workflow_id)


def test_depends_on_joins_the_workflow_of_its_first_prerequisite_that_has_one():
    lone = echo.using(delay=3600).enqueue("lone")
    first = chain(echo.s(1), echo.s()).enqueue()
    second = chain(echo.s(2), echo.s()).enqueue()
    tail = Job.objects.filter(workflow=second).order_by("id").last()
    dependent = echo.using(depends_on=[lone, tail, first.output]).enqueue()
    assert dependent.workflow_id == second.pk
    assert fresh(lone).workflow_id == second.pk  # adopted too
    assert_counters_match_jobs(first)
    assert_counters_match_jobs(second)


def test_depends_on_a_missing_job_is_refused_and_nothing_is_written():
    lone = echo.enqueue("lone")
    with pytest.raises(InvalidOption, match=f"{lone.pk + 1000}"):
        echo.using(depends_on=[lone, lone.pk + 1000]).enqueue()
    assert Job.objects.count() == 1 and Workflow.objects.count() == 0
    assert Dependency.objects.count() == 0
    assert fresh(lone).workflow_id is None


@pytest.mark.parametrize("depends_on", [["1"], [None], [1.5], "job"], ids=repr)
def test_depends_on_something_other_than_jobs_or_ids_is_refused(depends_on):
    with pytest.raises(InvalidOption, match="depends_on"):
        echo.using(depends_on=depends_on).enqueue()
    assert Job.objects.count() == 0


def test_a_bad_run_if_is_refused_and_nothing_is_written():
    lone = echo.enqueue("lone")
    with pytest.raises(InvalidOption, match="run_if"):
        echo.using(depends_on=[lone], run_if="sometimes").enqueue()
    assert Job.objects.count() == 1 and Workflow.objects.count() == 0


def test_enqueue_many_with_depends_on_joins_the_prerequisites_workflow(drain):
    wf = chain(echo.s(1), echo.s()).enqueue()
    first = wf.jobs.order_by("id").first()
    jobs = double.using(depends_on=[first]).enqueue_many([((1,), {}), ((2,), {})])
    assert [job.workflow_id for job in jobs] == [wf.pk, wf.pk]
    assert [job.status for job in jobs] == ["blocked", "blocked"]
    drain()
    assert [fresh(job).result for job in jobs] == [2, 4]
    assert assert_counters_match_jobs(wf).counts["succeeded"] == 4


def test_a_job_naming_a_job_of_a_cancelled_workflow_starts_its_own_workflow(drain):
    wf = chain(echo.s(1), echo.s()).enqueue()
    first = wf.jobs.order_by("id").first()
    operations.cancel_workflow(wf)
    job = echo.using(depends_on=[first], run_if="all_finished").enqueue(2)
    assert job.workflow_id != wf.pk
    drain()
    assert fresh(job).status == "succeeded"
    assert assert_counters_match_jobs(wf).status == "cancelled"
