"""The driver contract (``db/base.py``), run against the vendor of the test database.

Every branch of the outcome write is covered here: each kind of outcome, with and without a
requested cancellation, with attempts left and spent, with and without a progress report, and
each fence (owner, attempt, status, a row that is gone, a row another session holds locked).
The expectations are the design's words (``docs/explanation/architecture.md``), written out
here, not read from ``outcomes.py``.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_workqueue.db import Outcome, OutcomeKind, Progress, driver_for
from django_workqueue.models import Job, Queue
from tests.support.database import db_now, row_snapshot
from tests.support.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "worker-a"  # JobFactory's running jobs are leased to it
AT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def driver():
    return driver_for("default")


def outcome(job: Job, kind: OutcomeKind, **fields: Any) -> Outcome:
    return Outcome(
        job_id=job.pk, attempt=job.attempt, kind=kind, max_attempts=job.max_attempts,
        attempts_charged=job.attempts_charged, crashes_charged=job.crashes_charged, **fields,
    )  # fmt: skip


def failure(job: Job, kind: OutcomeKind = OutcomeKind.RETRY, **fields: Any) -> Outcome:
    error = {"type": "builtins.ValueError", "message": "boom", "traceback": "Traceback ..."}
    return outcome(job, kind, error=error, **fields)


def write(*outcomes: Outcome) -> set[tuple[int, int]]:
    return driver().record_many(OWNER, outcomes).written


def seconds_after_now(value: dt.datetime) -> float:
    return (value - db_now()).total_seconds()


# --- the outcome write: what each ending stores --------------------------------------------


def test_a_success_stores_its_result_and_ends_the_job():
    job = JobFactory(running=True)
    assert write(outcome(job, OutcomeKind.SUCCEEDED, result_json='{"n": 3}')) == {(job.pk, 1)}
    job.refresh_from_db()
    assert (job.status, job.result, job.lease_owner, job.lease_expires_at) == (
        "succeeded", {"n": 3}, None, None,
    )  # fmt: skip
    assert job.finished_at is not None and job.errors == [] and job.max_attempts == 3


def test_a_success_stands_even_when_cancellation_was_requested():
    job = JobFactory(running=True, cancel_requested_at=timezone.now())
    write(outcome(job, OutcomeKind.SUCCEEDED, result_json="1"))
    assert Job.objects.get(pk=job.pk).status == "succeeded"


def test_a_retry_without_delay_is_ready_again_at_once_and_records_the_error():
    job = JobFactory(running=True)
    write(failure(job, delay=0.0))
    job.refresh_from_db()
    assert (job.status, job.finished_at, job.lease_owner, job.max_attempts) == (
        "ready", None, None, 3,
    )  # fmt: skip
    assert abs(seconds_after_now(job.run_after)) < 5
    [error] = job.errors
    assert (error["attempt"], error["type"], error["message"]) == (1, "builtins.ValueError", "boom")
    assert AT.match(error["at"]), error["at"]  # one format on every database


def test_a_retry_with_a_delay_is_scheduled_for_then():
    job = JobFactory(running=True)
    write(failure(job, delay=30.0))
    job.refresh_from_db()
    assert job.status == "scheduled"
    assert 25 < seconds_after_now(job.run_after) <= 30


def test_a_retry_with_its_attempts_spent_fails_the_job():
    job = JobFactory(running=True, attempt=3, max_attempts=3, attempts_charged=2)
    write(failure(job, delay=30.0))
    job.refresh_from_db()
    assert job.status == "failed" and job.finished_at is not None
    assert (job.attempts_charged, job.max_attempts) == (3, 3)


def test_claims_that_spent_nothing_leave_a_failure_its_budget():
    """Four claims, two of them given back (a release, a snooze): the budget is what the
    body spent, not how often the job was claimed."""
    job = JobFactory(running=True, attempt=4, max_attempts=3, attempts_charged=1)
    write(failure(job, delay=30.0))
    job.refresh_from_db()
    assert (job.status, job.attempt, job.attempts_charged, job.max_attempts) == (
        "scheduled", 4, 2, 3,
    )  # fmt: skip


@pytest.mark.parametrize(
    "kind", [OutcomeKind.RETRY, OutcomeKind.DISCARD, OutcomeKind.SNOOZE, OutcomeKind.RELEASE]
)
def test_a_requested_cancellation_turns_any_other_ending_into_cancelled(kind):
    job = JobFactory(running=True, cancel_requested_at=timezone.now())
    write(failure(job, kind, delay=30.0))
    job.refresh_from_db()
    assert job.status == "cancelled" and job.finished_at is not None


def test_a_discard_fails_the_job_with_attempts_left():
    job = JobFactory(running=True, attempt=1, max_attempts=5)
    write(failure(job, OutcomeKind.DISCARD))
    job.refresh_from_db()
    assert (job.status, len(job.errors)) == ("failed", 1)


def test_a_cancelled_ending_is_cancelled():
    job = JobFactory(running=True)
    write(failure(job, OutcomeKind.CANCELLED))
    assert Job.objects.get(pk=job.pk).status == "cancelled"


@pytest.mark.parametrize(("delay", "status"), [(0.0, "ready"), (60.0, "scheduled")])
def test_a_snooze_spends_no_budget(delay, status):
    job = JobFactory(running=True, attempt=3, max_attempts=3, attempts_charged=2)
    write(outcome(job, OutcomeKind.SNOOZE, delay=delay))
    job.refresh_from_db()
    assert (job.status, job.attempt, job.errors) == (status, 3, [])
    assert (job.max_attempts, job.attempts_charged, job.crashes_charged) == (3, 2, 0)


def test_a_release_keeps_its_place_and_spends_no_budget():
    place = timezone.now() - dt.timedelta(hours=1)
    job = JobFactory(running=True, run_after=place)
    write(outcome(job, OutcomeKind.RELEASE))
    job.refresh_from_db()
    assert (job.status, job.run_after, job.errors) == ("ready", place, [])
    assert (job.max_attempts, job.attempts_charged, job.crashes_charged) == (3, 0, 0)


@pytest.mark.parametrize(("crashes", "status"), [(0, "ready"), (2, "failed")])
def test_an_expired_lease_keeps_its_place_and_spends_the_crash_budget(crashes, status):
    place = timezone.now() - dt.timedelta(hours=1)
    job = JobFactory(expired=True, attempt=crashes + 1, run_after=place, crashes_charged=crashes)
    write(failure(job, OutcomeKind.LEASE_EXPIRED))
    job.refresh_from_db()
    assert (job.status, job.run_after, job.max_attempts) == (status, place, 3)
    assert (job.attempts_charged, job.crashes_charged) == (0, crashes + 1)


def test_a_crash_leaves_the_body_budget_alone():
    """A task of one body attempt (the django.tasks default) survives a worker's crash."""
    job = JobFactory(expired=True, attempt=1, max_attempts=1)
    write(failure(job, OutcomeKind.LEASE_EXPIRED))
    job.refresh_from_db()
    assert (job.status, job.attempts_charged, job.crashes_charged) == ("ready", 0, 1)


def test_the_last_progress_report_lands_with_the_outcome():
    job = JobFactory(running=True)
    progress = (5, 5, "done", {"rows": [1, 2]})
    write(outcome(job, OutcomeKind.SUCCEEDED, result_json="1", progress=progress))
    job.refresh_from_db()
    assert (job.progress_current, job.progress_total, job.progress_message) == (5, 5, "done")
    assert job.progress_details == {"rows": [1, 2]}


def test_an_outcome_without_progress_leaves_the_progress_alone():
    job = JobFactory(running=True, progress_current=2, progress_total=9, progress_message="m")
    write(failure(job))
    job.refresh_from_db()
    assert (job.progress_current, job.progress_total, job.progress_message) == (2, 9, "m")


# --- the fences --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "change",
    [
        {"lease_owner": "worker-b"},
        {"attempt": 2},
        {"status": "ready", "lease_owner": None},
        {"status": "succeeded", "lease_owner": None},
    ],
    ids=["another-owner", "another-attempt", "released", "finished"],
)
def test_an_outcome_for_a_lease_not_held_changes_nothing(change):
    job = JobFactory(running=True)
    stale = outcome(job, OutcomeKind.SUCCEEDED, result_json="1")
    Job.objects.filter(pk=job.pk).update(**change)
    before = row_snapshot(job.pk)
    recorded = driver().record_many(OWNER, [stale], skip_locked=True)
    assert (recorded.written, recorded.busy) == (set(), set())
    assert row_snapshot(job.pk) == before


def test_an_outcome_for_a_deleted_job_is_neither_written_nor_busy():
    job = JobFactory(running=True)
    gone = outcome(job, OutcomeKind.SUCCEEDED, result_json="1")
    Job.objects.filter(pk=job.pk).delete()
    recorded = driver().record_many(OWNER, [gone], skip_locked=True)
    assert (recorded.written, recorded.busy) == (set(), set())
    report = Progress(job_id=job.pk, attempt=1, current=1, total=None, message="")
    recorded = driver().write_progress(OWNER, [report], skip_locked=True)
    assert (recorded.written, recorded.busy) == (set(), set())


@pytest.mark.postgres_only  # row locks: SQLite locks the whole database, never one row
def test_writes_skip_a_row_another_session_holds_locked_and_report_it_busy(hold_row):
    locked, free = JobFactory(running=True), JobFactory(running=True)
    hold_row(locked.pk)
    recorded = driver().record_many(
        OWNER,
        [outcome(job, OutcomeKind.SUCCEEDED, result_json="1") for job in (locked, free)],
        skip_locked=True,
    )
    assert (recorded.written, recorded.busy) == ({(free.pk, 1)}, {locked.pk})
    reports = [Progress(job_id=locked.pk, attempt=1, current=1, total=2, message="")]
    recorded = driver().write_progress(OWNER, reports, skip_locked=True)
    assert (recorded.written, recorded.busy) == (set(), {locked.pk})
    assert Job.objects.get(pk=locked.pk).status == "running"


@pytest.mark.postgres_only  # row locks: SQLite locks the whole database, never one row
def test_began_skips_a_row_another_session_holds_locked(hold_row):
    locked, free = JobFactory.create_batch(2)
    driver().claim(["default"], 2, OWNER, ahead=True)
    hold_row(locked.pk)

    assert driver().began(OWNER, [(locked.pk, 1), (free.pk, 1)]) == {free.pk}

    assert Job.objects.get(pk=locked.pk).claimed_ahead
    assert not Job.objects.get(pk=free.pk).claimed_ahead


# --- progress ----------------------------------------------------------------------------


def test_progress_is_written_for_leases_held_only():
    mine, other = JobFactory(running=True), JobFactory(running=True, lease_owner="worker-b")
    reports = [
        Progress(job_id=job.pk, attempt=1, current=7, total=10, message="seven")
        for job in (mine, other)
    ]
    recorded = driver().write_progress(OWNER, reports)
    assert recorded.written == {(mine.pk, 1)}
    assert Job.objects.get(pk=mine.pk).progress == {"current": 7, "total": 10, "message": "seven"}
    assert Job.objects.get(pk=other.pk).progress_current is None


# --- insert, claim, promote, expire, retake ----------------------------------------------


def test_insert_schedules_a_job_due_later_and_readies_a_job_due_now(vendor):
    from django_workqueue.db import NewJob

    template = dict(task_name="t", queue="default", priority=0, max_attempts=3, lease_seconds=60)
    later = driver().insert(NewJob(**template, delay=60.0), [("[]", "{}")])
    now = driver().insert(NewJob(**template), [("[]", "{}")])
    past = driver().insert(
        NewJob(**template, run_at=timezone.now() - dt.timedelta(minutes=1)), [("[]", "{}")]
    )
    assert (later.status, now.status, past.status) == ("scheduled", "ready", "ready")
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses == {later.ids[0]: "scheduled", now.ids[0]: "ready", past.ids[0]: "ready"}


TEMPLATE = dict(task_name="t", queue="default", priority=0, max_attempts=3, lease_seconds=60)


@pytest.mark.parametrize("size", [1, 4])  # PostgreSQL writes one row and a batch differently
def test_insert_with_keys_skips_rows_whose_key_is_held_and_says_which_were_written(size):
    from django_workqueue.db import NewJob

    held = driver().insert(NewJob(**TEMPLATE, unique_key="b"), [("[0]", "{}")])
    keys = ["b", "a", None, "a"][:size]
    payloads = [(f"[{n}]", "{}") for n in range(size)]
    inserted = driver().insert(NewJob(**TEMPLATE), payloads, keys)
    written = {1: [], 4: [1, 2]}[size]  # "b" is held; the second "a" meets the first
    assert inserted.positions == written
    assert len(inserted.ids) == len(written)
    rows = dict(Job.objects.filter(pk__in=inserted.ids).values_list("id", "args"))
    assert rows == {pk: [position] for pk, position in zip(inserted.ids, written, strict=True)}
    assert Job.objects.filter(unique_key="b").get().pk == held.ids[0]


@pytest.mark.parametrize("size", [1, 3])
def test_insert_of_arguments_encoded_together_keeps_their_order(size):
    from django_workqueue.db import Encoded, NewJob

    text = "[" + ",".join(f'[[{n}],{{"n":{n}}}]' for n in range(size)) + "]"
    inserted = driver().insert(NewJob(**TEMPLATE), Encoded(text, size))
    assert inserted.positions is None
    assert (inserted.status, len(inserted.ids)) == ("ready", size)
    rows = Job.objects.filter(pk__in=inserted.ids).order_by("pk")
    assert [(job.pk, job.args, job.kwargs) for job in rows] == [
        (pk, [n], {"n": n}) for n, pk in enumerate(inserted.ids)
    ]


def test_insert_with_unique_for_stores_the_start_of_the_window_of_the_database_clock():
    from django_workqueue.db import NewJob

    first = driver().insert(NewJob(**TEMPLATE, unique_for=60), [("[]", "{}")], ["k"])
    Job.objects.filter(pk__in=first.ids).update(status="succeeded")
    again = driver().insert(NewJob(**TEMPLATE, unique_for=60), [("[]", "{}")], ["k"])
    window = first.unique_window
    assert window <= first.enqueued_at < window + dt.timedelta(seconds=60)
    assert (window.second, window.microsecond) == (0, 0)
    assert Job.objects.get(pk=first.ids[0]).unique_window == window
    assert (again.ids, again.positions) == ([], [])  # the window's job, though finished


@pytest.mark.parametrize("status", ["ready", "scheduled", "blocked", "held"])
def test_replace_waiting_gives_a_waiting_job_new_arguments_and_run_after(status):
    from django_workqueue.db import NewJob

    job = JobFactory(status=status, unique_key="k", task_name="t", args=[1])
    pk = driver().replace_waiting(NewJob(**TEMPLATE, delay=60.0), "k", ("[2]", '{"x": 1}'))
    assert pk == job.pk
    job.refresh_from_db()
    assert (job.args, job.kwargs) == ([2], {"x": 1})
    assert 55 < seconds_after_now(job.run_after) <= 60
    # A waiting job becomes what its new run_after makes it; blocked and held stay so.
    assert job.status == {"ready": "scheduled"}.get(status, status)


def test_replace_waiting_with_no_delay_makes_a_scheduled_job_ready():
    from django_workqueue.db import NewJob

    job = JobFactory(status="scheduled", unique_key="k", task_name="t",
                     run_after=timezone.now() + dt.timedelta(hours=1))  # fmt: skip
    assert driver().replace_waiting(NewJob(**TEMPLATE), "k", ("[]", "{}")) == job.pk
    assert Job.objects.get(pk=job.pk).status == "ready"


@pytest.mark.parametrize("status", ["running", "succeeded", "failed", "cancelled"])
def test_replace_waiting_never_changes_a_running_or_finished_job(status):
    from django_workqueue.db import NewJob

    job = JobFactory(status=status, unique_key="k", task_name="t", args=[1])
    before = row_snapshot(job)
    assert driver().replace_waiting(NewJob(**TEMPLATE), "k", ("[2]", "{}")) is None
    assert row_snapshot(job) == before


def test_claims_never_see_scheduled_jobs_and_promotion_makes_them_claimable():
    due = JobFactory(status="scheduled", run_after=timezone.now() - dt.timedelta(seconds=5))
    later = JobFactory(status="scheduled", run_after=timezone.now() + dt.timedelta(hours=1))
    assert driver().claim(["default"], 10, OWNER) == []
    assert driver().promote(100) == ["default"]
    assert Job.objects.get(pk=later.pk).status == "scheduled"
    [claimed] = driver().claim(["default"], 10, OWNER)
    assert claimed.id == due.pk


def test_claims_leave_out_queues_paused_in_the_queue_table():
    mail = JobFactory(queue="mail", priority=5)
    job = JobFactory(queue="default")
    Queue.objects.create(name="mail", paused_at=timezone.now())
    Queue.objects.create(name="default")  # a row without paused_at is not paused
    assert driver().claim(["mail"], 10, OWNER) == []
    assert [j.id for j in driver().claim(["mail", "default"], 10, OWNER)] == [job.pk]
    Queue.objects.filter(name="mail").update(paused_at=None)
    assert [j.id for j in driver().claim(["mail", "default"], 10, OWNER)] == [mail.pk]


def test_promotion_takes_the_earliest_first_up_to_its_limit_with_an_injected_clock():
    base = timezone.now() + dt.timedelta(hours=1)
    # Inserted latest first, so that neither id nor table order is run_after order.
    jobs = {
        queue: JobFactory(status="scheduled", run_after=base + dt.timedelta(seconds=n), queue=queue)
        for n, queue in [(2, "reports"), (1, "default"), (0, "mail")]
    }
    promoted = driver().promote(2, now=base + dt.timedelta(minutes=1))
    assert sorted(promoted) == ["default", "mail"]
    statuses = {queue: Job.objects.get(pk=job.pk).status for queue, job in jobs.items()}
    assert statuses == {"mail": "ready", "default": "ready", "reports": "scheduled"}


def test_expired_leases_are_the_running_jobs_past_their_lease(vendor):
    expired = JobFactory(expired=True, queue="mail")
    JobFactory(running=True)
    JobFactory(status="ready", lease_expires_at=timezone.now() - dt.timedelta(hours=1))
    with transaction.atomic():
        [row] = driver().expired_leases(10)
    assert (row.id, row.attempt, row.max_attempts, row.owner, row.queue) == (
        expired.pk, 1, 3, OWNER, "mail",
    )  # fmt: skip
    later = timezone.now() + dt.timedelta(minutes=5)
    with transaction.atomic():
        assert len(driver().expired_leases(10, now=later)) == 2


def test_retake_leases_a_released_job_back_only_if_nobody_claimed_it_since():
    job = JobFactory(running=True)
    assert write(outcome(job, OutcomeKind.RELEASE))
    assert driver().retake(OWNER, job.pk, 1) is True
    job.refresh_from_db()
    assert (job.status, job.lease_owner, job.attempt, job.max_attempts) == (
        "running", OWNER, 1, 3,
    )  # fmt: skip
    write(outcome(job, OutcomeKind.RELEASE))
    driver().claim(["default"], 1, "worker-b")  # attempt 2, another owner
    assert driver().retake(OWNER, job.pk, 1) is False


def test_lease_states_tell_a_finished_job_from_a_deleted_one():
    running, finished = JobFactory(running=True), JobFactory(status="succeeded")
    deleted = JobFactory(running=True)
    Job.objects.filter(pk=deleted.pk).delete()
    states = driver().lease_states([running.pk, finished.pk, deleted.pk])
    assert states == {running.pk: ("running", OWNER), finished.pk: ("succeeded", None)}


# --- workflows: counting prerequisites' endings on their dependents ------------------------


def test_count_down_counts_endings_on_blocked_rows_and_returns_each_as_it_is_now():
    from django_workqueue.db import CountedDown
    from django_workqueue.models import Workflow

    workflow = Workflow.objects.create(name="w")
    waits_for_three = JobFactory(
        status="blocked", waiting_on=3, prerequisites_succeeded=1, workflow=workflow,
        run_condition="all_finished", queue="mail",
    )  # fmt: skip
    waits_for_one = JobFactory(status="blocked", waiting_on=1)
    later = JobFactory(
        status="blocked", waiting_on=1, run_after=timezone.now() + dt.timedelta(hours=1)
    )
    with transaction.atomic():
        counted = driver().count_down(
            [(waits_for_three.pk, 2, 1), (waits_for_one.pk, 1, 0), (later.pk, 1, 1)]
        )
    assert sorted(counted, key=lambda row: row.id) == [
        CountedDown(waits_for_three.pk, 1, 2, "all_finished", workflow.pk, True, "mail"),
        CountedDown(waits_for_one.pk, 0, 0, "all_succeeded", None, True, "default"),
        CountedDown(later.pk, 0, 1, "all_succeeded", None, False, "default"),
    ]
    rows = Job.objects.filter(pk__in=[waits_for_three.pk, waits_for_one.pk, later.pk])
    assert sorted(rows.values_list("id", "waiting_on", "prerequisites_succeeded", "status")) == [
        (waits_for_three.pk, 1, 2, "blocked"),
        (waits_for_one.pk, 0, 0, "blocked"),  # the caller decides what happens next
        (later.pk, 0, 1, "blocked"),
    ]


@pytest.mark.parametrize("status", ["ready", "scheduled", "running", "succeeded", "cancelled"])
def test_count_down_leaves_rows_that_are_no_longer_blocked_alone(status):
    gone = JobFactory(status=status, waiting_on=1)
    blocked = JobFactory(status="blocked", waiting_on=2)
    before = row_snapshot(gone)
    counted = driver().count_down([(gone.pk, 1, 1), (blocked.pk, 1, 1)])
    assert [row.id for row in counted] == [blocked.pk]
    assert row_snapshot(gone) == before


def test_count_down_of_nothing_or_of_a_missing_row_counts_nothing():
    assert driver().count_down([]) == []
    job = JobFactory(status="blocked", waiting_on=1)
    Job.objects.filter(pk=job.pk).delete()
    assert driver().count_down([(job.pk, 1, 0)]) == []


def test_the_lock_timeout_is_recognised_only_by_the_vendor_that_has_one(vendor):
    from django.db import OperationalError

    class LockNotAvailable(Exception):
        sqlstate = "55P03"

    error = OperationalError("canceling statement due to lock timeout")
    error.__cause__ = LockNotAvailable()
    assert driver().is_lock_timeout(error) is (vendor == "postgresql")
    assert driver().is_lock_timeout(OperationalError("connection refused")) is False


# --- the clock ------------------------------------------------------------------------------


def test_now_is_the_databases_clock_in_utc():
    first = JobFactory()  # enqueued_at: the database's clock, written by the database
    now = driver().now()
    second = JobFactory()
    assert now.utcoffset() == dt.timedelta(0)
    assert first.enqueued_at is not None
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.enqueued_at <= now <= second.enqueued_at


def test_estimate_count_is_the_planners_on_postgresql_and_none_on_sqlite(vendor) -> None:
    from django.db import connection

    from tests.support.factories import JobFactory

    JobFactory.create_batch(20)
    driver = driver_for("default")
    if vendor == "sqlite":
        assert driver.estimate_count(Job.objects.all()) is None
        return
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")
    assert driver.estimate_count(Job.objects.all()) == 20
    estimate = driver.estimate_count(Job.objects.filter(status="ready"))
    assert estimate is not None and 1 <= estimate <= 20


@pytest.mark.postgres_only  # lock_timeout and row locks: SQLite locks the whole database
def test_an_outcome_write_waits_for_a_row_lock_two_seconds_at_most_within_its_transaction(
    hold_row,
):
    """The bound is set by the write itself, for its transaction only (the workflow effects
    written after it in the same transaction are bounded too): nothing stays on the session,
    which a transaction pooler would hand to another client."""
    from django.db import OperationalError, connection

    def lock_timeout() -> str:
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            return cursor.fetchone()[0]

    default = lock_timeout()
    job = JobFactory(running=True)
    release = hold_row(job.pk)  # held up to 30 s: an unbounded wait would then succeed
    with pytest.raises(OperationalError) as caught, transaction.atomic():
        driver().record_many(OWNER, [outcome(job, OutcomeKind.SUCCEEDED, result_json="1")])
    assert driver().is_lock_timeout(caught.value), caught.value
    release.set()
    with transaction.atomic():
        assert driver().record_many(OWNER, [outcome(job, OutcomeKind.SUCCEEDED, result_json="1")])
        assert lock_timeout() == "2s"
    assert (lock_timeout(), Job.objects.get(pk=job.pk).status) == (default, "succeeded")


# --- flow control: the walk over flow keys -------------------------------------------------


def test_flow_keys_walk_ready_keys_from_the_cursor_then_wrap_around():
    for queue, key, task in [("default", "k1", "t.one"), ("default", "k2", "t.two"),
                             ("default", "k3", "t.three"), ("default", "k5", "t.five"),
                             ("mail", "k2", "t.two"), ("mail", "k6", "t.six"),
                             ("reports", "k4", "t.four")]:  # fmt: skip
        JobFactory.create_batch(2, queue=queue, flow_key=key, task_name=task)
    JobFactory(queue="default", flow_key="k0", running=True)  # not ready: not walked
    JobFactory(queue="default", flow_key="k9", status="scheduled")
    JobFactory(queue="default")  # no flow key
    Queue.objects.create(name="reports", paused_at=timezone.now())  # a paused queue's keys

    def walk(queues: list[str], after: str, limit: int) -> list[tuple[str, str, str]]:
        return [(g.queue, g.key, g.task_name) for g in driver().flow_keys(queues, after, limit)]

    one = ["default", "reports"]  # the paused queue adds nothing
    assert walk(one, "", 2) == [("default", "k1", "t.one"), ("default", "k2", "t.two")]
    assert walk(one, "k2", 2) == [("default", "k3", "t.three"), ("default", "k5", "t.five")]
    # Short after the cursor: the walk goes on from the first key, up to the cursor.
    assert walk(one, "k3", 3) == [("default", "k5", "t.five"), ("default", "k1", "t.one"),
                                  ("default", "k2", "t.two")]  # fmt: skip
    assert walk(one, "k5", 10) == [
        ("default", "k1", "t.one"), ("default", "k2", "t.two"), ("default", "k3", "t.three"),
        ("default", "k5", "t.five"),
    ]  # fmt: skip
    # Several queues: each queue's keys (the order among queues is the vendor's).
    assert sorted(walk(["default", "mail", "reports"], "k2", 10)) == [
        ("default", "k1", "t.one"), ("default", "k2", "t.two"), ("default", "k3", "t.three"),
        ("default", "k5", "t.five"), ("mail", "k2", "t.two"), ("mail", "k6", "t.six"),
    ]  # fmt: skip
    assert walk(["reports"], "", 5) == []


def test_flow_keys_count_each_groups_ready_jobs_up_to_count_where_the_driver_counts():
    JobFactory.create_batch(3, queue="default", flow_key="k1", task_name="t.one")
    JobFactory.create_batch(1, queue="default", flow_key="k2", task_name="t.two")
    JobFactory(queue="default", flow_key="k2", running=True)  # not ready: not counted

    walked = {g.key: g.ready for g in driver().flow_keys(["default"], "", 5, count=2)}
    uncounted = {g.key: g.ready for g in driver().flow_keys(["default"], "", 5)}

    # SQLite counts within its walk; PostgreSQL does not count (its claim ranks the rounds).
    assert walked == (
        {"k1": 2, "k2": 1} if connection.vendor == "sqlite" else {"k1": None, "k2": None}
    )
    assert uncounted == {"k1": None, "k2": None}
