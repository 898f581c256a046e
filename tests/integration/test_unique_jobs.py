"""Unique jobs: keys derived from arguments (``unique_on``), the ``keep`` and ``replace``
modes, ``unique_for`` windows, per-row keys in ``enqueue_many``, racing enqueues, and
per-task deadlines (``expires_after``). Every guarantee is a constraint or a guarded write."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F

from django_workqueue import task
from django_workqueue.exceptions import InvalidOption
from django_workqueue.maintenance import promoter
from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import add
from tests.support.database import db_now, fresh
from tests.support.tasks import (
    daily_report,
    debounced_sync,
    expiring_attempts,
    rebuild_sitemap,
    retries_past_its_deadline,
    sync_customer,
    sync_region,
    throttled_mail,
)

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = dt.timedelta(hours=1)


def jobs_of(task_: Any) -> list[Job]:
    return list(Job.objects.filter(task_name=task_.name).order_by("pk"))


def finish(job: Job, status: str = Status.SUCCEEDED) -> None:
    """End a job as a worker would have (the key is then free)."""
    Job.objects.filter(pk=job.pk).update(status=status, finished_at=db_now())


# --- keys derived from the arguments ----------------------------------------------------------


def test_unique_on_makes_one_job_per_value_of_the_named_arguments():
    first = sync_customer.enqueue(7)
    again = sync_customer.enqueue(customer_id=7, full=True)  # other arguments do not count
    other = sync_customer.enqueue(8)
    assert (first.duplicate, again.duplicate, other.duplicate) == (False, True, False)
    assert again.pk == first.pk
    assert [job.pk for job in jobs_of(sync_customer)] == [first.pk, other.pk]
    assert fresh(first).unique_key == '@args:{"customer_id":7}'


def test_unique_on_binds_defaults_so_an_omitted_argument_counts_as_its_default():
    first = sync_region.enqueue(1)
    assert sync_region.enqueue(1, region="eu").pk == first.pk
    assert sync_region.enqueue(1, "us").duplicate is False
    assert fresh(first).unique_key == '@args:{"customer_id":1,"region":"eu"}'


def test_a_unique_on_function_makes_the_key_from_the_call():
    first = daily_report.enqueue("2026-11-26", recipients=["a"])
    again = daily_report.enqueue("2026-11-26", recipients=["b"])
    assert (again.pk, again.duplicate) == (first.pk, True)
    assert fresh(first).unique_key == "@fn:day-2026-11-26"


def test_a_derived_key_never_meets_a_hand_made_one():
    with pytest.raises(InvalidOption, match="starts with '@', which is kept for the keys"):
        sync_customer.using(unique_key='@args:{"customer_id":7}').enqueue(7)
    assert jobs_of(sync_customer) == []


def test_a_hand_made_key_overrides_unique_on():
    first = sync_customer.using(unique_key="nightly").enqueue(1)
    second = sync_customer.enqueue(1)  # its own derived key: not the hand-made one
    assert (fresh(first).unique_key, second.duplicate) == ("nightly", False)


def test_a_long_derived_key_is_stored_as_a_digest_that_still_matches():
    long = "x" * 400
    first = sync_customer.enqueue(long)
    key = fresh(first).unique_key
    assert key.startswith("@args#") and len(key) == len("@args#") + 64
    assert sync_customer.enqueue(long).pk == first.pk


def test_unique_on_naming_an_unknown_argument_is_refused_at_registration():
    with pytest.raises(InvalidOption, match="unique_on names 'customer', not a parameter of"):

        @task(unique_on=("customer",), name="tests.unique.unknown")
        def unknown(customer_id: int) -> None: ...


def test_a_unique_on_function_returning_no_string_is_refused_before_writing():
    def key(args: list[Any], kwargs: dict[str, Any]) -> Any:
        return args[0] if isinstance(args[0], int) else f"{args[0]}\x00"

    @task(unique_on=key, name="tests.unique.not_a_string")
    def not_a_string(value: Any) -> None: ...

    with pytest.raises(InvalidOption, match="unique_on returned 5; it must return a non-empty"):
        not_a_string.enqueue(5)
    with pytest.raises(InvalidOption, match="NUL"):
        not_a_string.enqueue("a")
    assert jobs_of(not_a_string) == []


def test_a_default_that_is_not_json_is_refused_as_a_key():
    marker = object()

    @task(unique_on=("option",), name="tests.unique.default_object")
    def default_object(option: Any = marker) -> None: ...

    with pytest.raises(InvalidOption, match="are not JSON"):
        default_object.enqueue()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"on_conflict": "update"}, 'on_conflict must be "keep" or "replace"'),
        ({"unique_for": 0}, "unique_for must be a whole number of seconds"),
        ({"unique_for": 1.5}, "unique_for must be a whole number of seconds"),
        ({"unique_for": 60, "on_conflict": "replace"}, "unique_for cannot be combined"),
        ({"expires_after": -1}, "expires_after must be a positive number"),
    ],
)
def test_bad_unique_or_expiry_options_are_refused_at_registration(options, message):
    with pytest.raises(InvalidOption, match=message):
        task(name="tests.unique.bad", **options)(lambda: None)


def test_bad_unique_options_of_using_are_refused_before_writing():
    with pytest.raises(InvalidOption, match='on_conflict must be "keep" or "replace"'):
        add.using(unique_key="k", on_conflict="merge").enqueue(1, 2)
    with pytest.raises(InvalidOption, match="unique_for must be a whole number"):
        add.using(unique_key="k", unique_for=-5).enqueue(1, 2)
    assert jobs_of(add) == []


def test_unique_steps_are_refused_in_a_workflow():
    from django_workqueue import chain

    with pytest.raises(InvalidOption, match=r"unique jobs .* are not supported for a workflow"):
        chain(add.s(1, 2), sync_customer.s()).enqueue()


# --- keep and replace -------------------------------------------------------------------------


def test_keep_returns_the_holder_and_leaves_it_unchanged():
    first = add.using(unique_key="k", delay=60).enqueue(1, 2)
    again = add.using(unique_key="k").enqueue(3, 4)
    assert (again.pk, again.duplicate, again.args) == (first.pk, True, [1, 2])
    assert fresh(first).run_after == first.run_after


def test_replace_gives_the_waiting_job_the_latest_arguments_and_restarts_its_timer():
    first = debounced_sync.using(delay=60).enqueue(5, note="first")
    # The timer restarts from the database's clock now: 600 s from the second call.
    latest = debounced_sync.using(delay=600).enqueue(5, note="latest")
    assert (latest.pk, latest.duplicate) == (first.pk, True)
    stored = fresh(first)
    assert (stored.args, stored.kwargs) == ([5], {"note": "latest"})
    assert stored.status == Status.SCHEDULED
    assert HOUR / 6 - dt.timedelta(minutes=1) < stored.run_after - db_now() <= HOUR / 6
    assert (latest.args, latest.kwargs, latest.run_after) == (
        stored.args, stored.kwargs, stored.run_after,
    )  # fmt: skip
    assert len(jobs_of(debounced_sync)) == 1


def test_replace_can_make_a_scheduled_job_due_and_a_ready_one_scheduled():
    job = debounced_sync.using(delay=600).enqueue(1)
    assert debounced_sync.enqueue(1).status == Status.READY  # no delay: due now
    assert fresh(job).status == Status.READY
    debounced_sync.using(delay=600).enqueue(1)
    assert fresh(job).status == Status.SCHEDULED


def test_replace_also_resets_the_deadline_when_the_new_call_gives_one():
    job = debounced_sync.using(deadline=60).enqueue(1)
    debounced_sync.using(deadline=HOUR).enqueue(1)
    assert fresh(job).deadline - db_now() > dt.timedelta(minutes=59)
    debounced_sync.enqueue(1)  # no deadline given: the job keeps its own
    assert fresh(job).deadline - db_now() > dt.timedelta(minutes=59)


def test_replace_keeps_a_held_job_held():
    job = debounced_sync.using(delay=600).enqueue(1, note="a")
    Job.objects.filter(pk=job.pk).update(status=Status.HELD)
    debounced_sync.enqueue(1, note="b")
    stored = fresh(job)
    assert (stored.status, stored.kwargs) == (Status.HELD, {"note": "b"})


def test_replace_never_touches_a_running_job_it_is_returned_as_the_duplicate():
    job = debounced_sync.enqueue(1, note="running")
    Job.objects.filter(pk=job.pk).update(status=Status.RUNNING, attempt=1, lease_owner="w")
    again = debounced_sync.enqueue(1, note="late")
    assert (again.pk, again.duplicate, again.status) == (job.pk, True, Status.RUNNING)
    stored = fresh(job)
    assert (stored.kwargs, stored.run_after) == ({"note": "running"}, job.run_after)
    assert len(jobs_of(debounced_sync)) == 1


def test_after_the_holder_finishes_the_key_is_free_again():
    first = debounced_sync.enqueue(1)
    finish(first)
    second = debounced_sync.enqueue(1)
    assert (second.duplicate, second.pk != first.pk) == (False, True)


def test_replace_is_also_a_using_option_for_a_hand_made_key():
    first = add.using(unique_key="k").enqueue(1, 2)
    again = add.using(unique_key="k", on_conflict="replace").enqueue(3, 4)
    assert (again.pk, fresh(first).args) == (first.pk, [3, 4])


# --- unique_for: one job per window, finished ones included ----------------------------------


def test_unique_for_allows_one_job_per_window_even_after_it_finished():
    first = rebuild_sitemap.enqueue()
    finish(first)
    again = rebuild_sitemap.enqueue()
    assert (again.pk, again.duplicate, again.status) == (first.pk, True, Status.SUCCEEDED)
    stored = fresh(first)
    assert stored.unique_key == "@task"
    # The window starts at a multiple of an hour of the database's clock, at or before now.
    window = stored.unique_window
    assert window <= stored.enqueued_at < window + HOUR
    assert (window.minute, window.second, window.microsecond) == (0, 0, 0)


def test_unique_for_windows_are_per_key():
    first = throttled_mail.enqueue(1)
    finish(first, Status.FAILED)
    assert throttled_mail.enqueue(1).pk == first.pk
    assert throttled_mail.enqueue(2).duplicate is False


def test_a_new_window_takes_a_new_job():
    first = rebuild_sitemap.enqueue()
    finish(first)
    # An hour passes: the finished job now belongs to the previous window.
    Job.objects.filter(pk=first.pk).update(unique_window=F("unique_window") - HOUR)
    second = rebuild_sitemap.enqueue()
    assert (second.duplicate, second.pk != first.pk) == (False, True)
    assert fresh(second).unique_window - fresh(first).unique_window == HOUR


def test_unique_for_as_a_using_option():
    first = add.using(unique_key="k", unique_for=60).enqueue(1, 2)
    finish(first)
    assert add.using(unique_key="k", unique_for=60).enqueue(1, 2).pk == first.pk
    assert add.using(unique_key="k").enqueue(1, 2).duplicate is False  # no window asked


# --- enqueue_many -------------------------------------------------------------------------------


def test_enqueue_many_reports_conflicts_per_row_in_input_order_without_aborting():
    held = sync_customer.enqueue(2)
    jobs = sync_customer.enqueue_many(
        [((1,), {}), ((2,), {}), ((3,), {}), ((1,), {"full": True}), ((4,), {})]
    )
    assert [job.duplicate for job in jobs] == [False, True, False, True, False]
    assert jobs[1].pk == held.pk
    assert jobs[3].pk == jobs[0].pk  # the batch's own first row with that key holds it
    assert [job.args for job in jobs] == [[1], [2], [3], [1], [4]]  # the holders' arguments
    assert len(jobs_of(sync_customer)) == 4
    assert {job.pk for job in jobs} == {job.pk for job in jobs_of(sync_customer)}


def test_enqueue_many_takes_a_key_per_item():
    held = add.using(unique_key="b").enqueue(0, 0)
    jobs = add.enqueue_many([((1, 2), {}, "a"), ((3, 4), {}, "b"), ((5, 6), {}), ((7, 8), {}, "a")])
    assert [job.duplicate for job in jobs] == [False, True, False, True]
    assert (jobs[1].pk, jobs[3].pk) == (held.pk, jobs[0].pk)
    assert [job.unique_key for job in jobs] == ["a", "b", None, "a"]


def test_enqueue_many_where_every_row_is_a_duplicate_inserts_nothing():
    held = sync_customer.enqueue(1)
    jobs = sync_customer.enqueue_many([((1,), {}), ((1,), {})])
    assert [(job.pk, job.duplicate) for job in jobs] == [(held.pk, True), (held.pk, True)]


def test_enqueue_many_refuses_a_bad_item_key_before_writing():
    with pytest.raises(InvalidOption, match="item 1: unique_key must be a string"):
        add.enqueue_many([((1, 2), {}, "a"), ((3, 4), {}, 42)])
    assert jobs_of(add) == []


def test_enqueue_many_with_replace_updates_each_waiting_holder_with_its_last_row():
    held = debounced_sync.using(delay=600).enqueue(1, note="old")
    jobs = debounced_sync.enqueue_many(
        [((1,), {"note": "a"}), ((2,), {"note": "x"}), ((1,), {"note": "b"})]
    )
    assert [job.duplicate for job in jobs] == [True, False, True]
    assert jobs[0].pk == jobs[2].pk == held.pk
    assert fresh(held).kwargs == {"note": "b"}


def test_a_duplicate_inside_a_transaction_that_rolls_back_leaves_the_holder():
    held = sync_customer.enqueue(1)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert sync_customer.enqueue(1).pk == held.pk
        sync_customer.enqueue(2)
        raise RuntimeError("roll back")
    assert [job.pk for job in jobs_of(sync_customer)] == [held.pk]


# --- per-task deadlines -----------------------------------------------------------------------


def test_expires_after_sets_each_jobs_deadline_from_its_enqueue_on_the_database_clock():
    job = fresh(retries_past_its_deadline.enqueue())
    assert job.deadline - job.enqueued_at == HOUR
    overridden = fresh(retries_past_its_deadline.using(deadline=60).enqueue())
    assert overridden.deadline - overridden.enqueued_at == dt.timedelta(seconds=60)


def test_a_retry_due_after_the_deadline_never_runs(drain):
    job = retries_past_its_deadline.enqueue()
    drain(concurrency=1)
    stored = fresh(job)
    assert (stored.status, stored.attempt) == (Status.SCHEDULED, 1)
    assert stored.run_after > stored.deadline
    # Three hours pass: the retry is due, and the deadline (an hour after enqueue) is past.
    Job.objects.filter(pk=job.pk).update(
        run_after=F("run_after") - 3 * HOUR, deadline=F("deadline") - 3 * HOUR
    )
    assert promoter.run_once() == 1
    drain(concurrency=1)
    stored = fresh(job)
    assert (stored.status, stored.attempt) == (Status.FAILED, 2)
    assert expiring_attempts[job.pk] == [1]  # the body ran once: the retry never started
    assert stored.errors[-1]["type"] == "django_workqueue.exceptions.DeadlineExceeded"
    assert "deadline" in stored.errors[-1]["message"]


def test_the_sqlite_connection_is_untouched_by_a_conflict():
    """A conflict skips the row without an error: the caller's transaction goes on."""
    with transaction.atomic():
        first = sync_customer.enqueue(1)
        assert sync_customer.enqueue(1).pk == first.pk
        assert sync_customer.enqueue(2).duplicate is False
        assert connection.needs_rollback is False
