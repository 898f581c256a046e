"""The worker, in process: slot threads run jobs and record their outcomes (SQLite and PostgreSQL).

Workers run on threads (``drain`` in this thread until nothing is ready, ``background_worker``
on its own thread), so every test here uses committed data: ``transaction=True``.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from django_workqueue.models import Job, WorkerProcess
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from testproject.testapp.models import Effect, LedgerEntry
from testproject.testapp.tasks import (
    add,
    always_fails,
    async_add,
    async_too_slow,
    atomic_effect,
    classified,
    discard_me,
    flaky,
    progress,
    record,
    retry_later,
    returns_object,
    send_mail,
    sleep_for,
    snooze_once,
    times_out,
)
from tests.support.database import fresh, ledger, ledger_order, parse_at
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.tasks import (
    connection_state,
    fails_with_backoff,
    leaks_transaction,
    reports_twice,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

EXC = "django_workqueue.exceptions"


def error_summary(job: Job) -> list[tuple[int, str, str]]:
    return [(e["attempt"], e["type"], e["message"]) for e in job.errors]


# --- running and storing results ----------------------------------------------------------


def test_drain_runs_jobs_and_stores_results(drain):
    first, second = add.enqueue(1, 2), add.enqueue(20, 22)
    mail = send_mail.enqueue("ada@example.com", subject="hi")

    worker = drain()

    assert worker.finished_count == 3
    for job, result in [
        (first, 3),
        (second, 42),
        (mail, {"to": "ada@example.com", "subject": "hi"}),
    ]:
        job = fresh(job)
        assert (job.status, job.result, job.attempt) == ("succeeded", result, 1)
        assert job.errors == []
        assert job.lease_owner is None and job.lease_expires_at is None
        assert job.started_at is not None and job.finished_at >= job.started_at


def test_higher_priority_runs_first_and_fifo_within_a_priority(drain):
    # Enqueued out of priority order; within a priority the order of enqueue must hold.
    low = record.using(priority=-5).enqueue(note="low")
    mid_a = record.enqueue(note="mid a")
    high_a = record.using(priority=10).enqueue(note="high a")
    mid_b = record.enqueue(note="mid b")
    high_b = record.using(priority=10).enqueue(note="high b")
    mid_c = record.enqueue(note="mid c")

    drain(concurrency=1)

    expected = [high_a, high_b, mid_a, mid_b, mid_c, low]
    assert ledger_order() == [job.pk for job in expected]


def test_fifo_within_a_priority_for_jobs_inserted_together(drain):
    # One multi-row INSERT gives every job the same run_after: the id breaks the tie.
    jobs = record.enqueue_many([((), {"note": str(n)}) for n in range(6)])

    drain(concurrency=1)

    assert ledger_order() == [job.pk for job in jobs]


def test_queues_option_serves_only_those_queues(drain):
    default = add.enqueue(1, 1)
    mail = send_mail.enqueue("bob@example.com")
    reports = add.using(queue="reports").enqueue(2, 2)

    drain(queues=["mail", "reports"])

    assert (fresh(mail).status, fresh(reports).status) == ("succeeded", "succeeded")
    default = fresh(default)
    assert (default.status, default.attempt, default.result) == ("ready", 0, None)


def test_delayed_job_is_not_claimed_until_due(drain):
    later = add.using(delay=3600).enqueue(5, 5)
    now = add.enqueue(1, 1)

    drain()

    assert fresh(now).status == "succeeded"
    later = fresh(later)
    assert (later.status, later.attempt) == ("scheduled", 0)

    Job.objects.filter(pk=later.pk).update(run_after=timezone.now() - dt.timedelta(seconds=1))
    drain()

    later = fresh(later)
    assert (later.status, later.result, later.attempt) == ("succeeded", 10, 1)


def test_max_jobs_stops_after_n(drain):
    jobs = [record.enqueue(note=str(n)) for n in range(5)]

    worker = drain(concurrency=2, max_jobs=2)

    assert worker.claimed_count == 2
    statuses = sorted(fresh(job).status for job in jobs)
    assert statuses == ["ready", "ready", "ready", "succeeded", "succeeded"]
    assert LedgerEntry.objects.count() == 2


def test_burst_exits_when_nothing_is_ready(drain):
    scheduled = add.using(delay=3600).enqueue(1, 2)
    worker_box = {}
    # On a thread with a join timeout: a burst worker that never exits fails, it does not hang.
    thread = threading.Thread(target=lambda: worker_box.setdefault("worker", drain()))
    thread.start()
    thread.join(20)

    assert not thread.is_alive(), "the burst worker did not exit with nothing ready"
    assert worker_box["worker"].claimed_count == 0
    assert fresh(scheduled).status == "scheduled"


class StoppedMidPass(Worker):
    """A worker whose stop request arrives during a pass, after the heartbeat and before the
    claim: where runworker's SIGTERM handler lands when the signal comes in mid-pass (Python
    runs it on the control thread between two statements of the pass)."""

    def _heartbeat(self) -> None:
        self.stop()
        super()._heartbeat()


def test_a_stop_requested_mid_pass_claims_nothing_more():
    """After SIGTERM the worker stops claiming (as documented), also in the pass the signal
    arrived in: a job claimed then would run within the grace, or be released past it and run
    a second time elsewhere (a needless re-run of its side effects)."""
    job = add.enqueue(1, 2)
    worker = StoppedMidPass(concurrency=1, poll_interval=0.05, grace_seconds=5)

    assert worker.run() == 0

    job.refresh_from_db()
    assert (job.status, job.attempt, job.lease_owner) == (Status.READY, 0, None)
    assert worker.claimed_count == 0
    assert Job.objects.filter(status=Status.RUNNING).count() == 0


# --- retries, backoff and the dead-letter queue -------------------------------------------


def test_flaky_task_succeeds_on_attempt_three_with_two_errors(drain):
    job = flaky.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == ("succeeded", 3, "succeeded on attempt 3")
    assert error_summary(job) == [
        (1, "builtins.ConnectionError", "flaky failure on attempt 1"),
        (2, "builtins.ConnectionError", "flaky failure on attempt 2"),
    ]
    for error in job.errors:
        assert "Traceback (most recent call last)" in error["traceback"]
        assert "in flaky" in error["traceback"]
        assert f"ConnectionError: flaky failure on attempt {error['attempt']}" in error["traceback"]
        assert error["at"]
    assert ledger(job) == [(1, ""), (2, ""), (3, "")]


def test_always_failing_task_ends_in_the_dead_letter_queue(drain):
    job = always_fails.enqueue()
    ok = add.enqueue(1, 2)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts) == ("failed", 3, 3)
    assert job.finished_at is not None and job.result is None
    assert error_summary(job) == [
        (n, "builtins.ValueError", f"boom on attempt {n}") for n in (1, 2, 3)
    ]
    assert list(Job.objects.dead_letters()) == [job]
    assert fresh(ok).status == "succeeded"


def test_backoff_delay_is_applied_after_a_failure(drain):
    job = fails_with_backoff.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("scheduled", 1)
    assert error_summary(job) == [(1, "builtins.ValueError", "failure on attempt 1")]
    # backoff=30 on attempt 1: 30 s, spread by RETRY_JITTER (0.1): between 27 and 33 seconds
    # after the failure was recorded (both times come from the database in one statement).
    delay = (job.run_after - parse_at(job.errors[0]["at"])).total_seconds()
    assert 27 - 0.01 <= delay <= 33 + 0.01


def test_retry_with_delay_sets_run_after(drain):
    job = retry_later.enqueue(3600)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("scheduled", 1)
    assert error_summary(job) == [(1, f"{EXC}.Retry", "try again later")]
    delay = (job.run_after - parse_at(job.errors[0]["at"])).total_seconds()
    assert delay == pytest.approx(3600, abs=0.01)


def test_retry_without_delay_runs_again_and_counts_an_attempt(drain):
    job = retry_later.enqueue(0)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result, job.max_attempts) == ("succeeded", 2, 2, 3)
    assert [e["type"] for e in job.errors] == [f"{EXC}.Retry"]


def test_snooze_does_not_charge_an_attempt(drain):
    job = snooze_once.enqueue()  # max_attempts=1: a charged snooze would end the job failed

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == ("succeeded", 2, 2)
    assert job.max_attempts == 2  # grew by one: the snoozed attempt was given back
    assert job.errors == []
    assert ledger(job) == [(1, ""), (2, "")]


def test_snooze_with_delay_puts_the_job_back_for_later(drain):
    job = snooze_once.enqueue(delay=600)

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts) == ("scheduled", 1, 2)
    assert job.finished_at is None
    assert job.run_after - job.started_at >= dt.timedelta(seconds=599)


def test_discard_fails_at_once_with_attempts_left(drain):
    job = discard_me.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts) == ("failed", 1, 5)
    assert error_summary(job) == [(1, f"{EXC}.Discard", "the account was deleted")]
    assert ledger(job) == [(1, "")]


@workqueue_settings(RETRY_BACKOFF_BASE=0)
def test_on_failure_classifier_discards_or_retries(drain):
    discarded = classified.enqueue(key_error=True)
    retried = classified.enqueue(key_error=False)

    drain()

    discarded = fresh(discarded)
    assert (discarded.status, discarded.attempt) == ("failed", 1)
    assert error_summary(discarded) == [(1, "builtins.KeyError", "'missing'")]
    retried = fresh(retried)
    assert (retried.status, retried.attempt) == ("failed", 5)
    assert error_summary(retried) == [(n, "builtins.OSError", "transient") for n in range(1, 6)]


# --- timeouts, async tasks, progress, bad results ------------------------------------------


@workqueue_settings(RETRY_BACKOFF_BASE=0)
def test_sync_task_past_its_timeout_records_job_timeout(drain):
    job = times_out.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("failed", 3)
    assert [(e["attempt"], e["type"]) for e in job.errors] == [
        (n, f"{EXC}.JobTimeout") for n in (1, 2, 3)
    ]
    assert "timeout of 0.3s" in job.errors[0]["message"]
    assert [attempt for attempt, _ in ledger(job)] == [1, 2, 3]


def test_async_task_runs(drain):
    jobs = [async_add.enqueue(n, 10) for n in range(3)]

    drain()

    assert [(fresh(j).status, fresh(j).result) for j in jobs] == [
        ("succeeded", 10),
        ("succeeded", 11),
        ("succeeded", 12),
    ]


def test_async_task_past_its_timeout_fails_with_job_timeout(drain):
    job = async_too_slow.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt) == ("failed", 1)
    assert [e["type"] for e in job.errors] == [f"{EXC}.JobTimeout"]


def test_progress_is_stored(drain):
    job = progress.enqueue(4)

    drain()

    job = fresh(job)
    assert (job.status, job.result) == ("succeeded", 4)
    assert job.progress == {"current": 4, "total": 4, "message": "step 4"}


def test_the_last_progress_report_lands_before_the_outcome_for_every_job(drain, monkeypatch):
    # Reports are written by the control thread. Widen the gap between its progress pass and
    # its outcome pass, so jobs finish inside it: the outcome write must never overtake the
    # job's last report (it would fence the report out).
    original = Worker._write_progress

    def slow_write_progress(self):
        original(self)
        time.sleep(0.02)  # widens a race window; nothing waits on it

    monkeypatch.setattr(Worker, "_write_progress", slow_write_progress)
    # Each job's first report wakes the control thread; its last report and its outcome
    # arrive while that pass is still in its widened window.
    jobs = reports_twice.enqueue_many([((), {})] * 12)

    drain(concurrency=4)

    stored = Job.objects.filter(pk__in=[j.pk for j in jobs])
    assert {(j.status, j.progress_current, j.progress_message) for j in stored} == {
        ("succeeded", 2, "done")
    }


def test_result_that_is_not_json_fails_the_job(drain):
    job = returns_object.enqueue()

    drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.result) == ("failed", 1, None)
    [error] = job.errors
    assert error["type"] == f"{EXC}.ResultNotJSON"
    assert "returns_object" in error["message"] and "builtins.object" in error["message"]


# --- jobs the worker cannot run -----------------------------------------------------------


@workqueue_settings(RETRY_BACKOFF_BASE=0)
def test_unknown_task_name_fails_after_its_attempts_and_the_worker_goes_on(drain):
    gone = JobFactory(task_name="gone.module.task", max_attempts=2, priority=50)
    others = [add.enqueue(n, n) for n in range(3)]

    drain(concurrency=1)

    gone = fresh(gone)
    assert (gone.status, gone.attempt) == ("failed", 2)
    assert [(e["attempt"], e["type"]) for e in gone.errors] == [
        (1, f"{EXC}.TaskNotRegistered"),
        (2, f"{EXC}.TaskNotRegistered"),
    ]
    assert "'gone.module.task'" in gone.errors[0]["message"]
    assert [(fresh(j).status, fresh(j).result) for j in others] == [
        ("succeeded", 0),
        ("succeeded", 2),
        ("succeeded", 4),
    ]


@pytest.mark.postgres_only  # SQLite's JSON functions refuse rows nested past 1,000 levels
def test_arguments_nested_past_the_parser_fail_the_job_at_once(drain):
    """A row (written by raw SQL) nested deeper than Python's JSON parser goes fails at once with
    MalformedArguments: a RecursionError in the slot would leave no outcome, and the job would
    wait for the reaper on every attempt. 12,000 levels: past the parser of every supported
    Python (3.13's goes furthest, to ~10,000), within what PostgreSQL's jsonb accepts with its
    default stack."""
    depth = 12_000
    job = JobFactory(args=[], max_attempts=3)
    table = Job._meta.db_table
    cast = "::jsonb" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET args = %s{cast} WHERE id = %s",
            ["[" * depth + "]" * depth, job.pk],
        )
    drain(concurrency=1)
    # Not through the model: Django's JSONField cannot read those args back either.
    row = Job.objects.values("status", "attempt", "errors").get(pk=job.pk)
    assert (row["status"], row["attempt"]) == (Status.FAILED, 1)
    [error] = row["errors"]
    assert error["type"].endswith("MalformedArguments")
    assert "nested too deeply" in error["message"]


def test_deadline_passed_before_run_fails_without_running(drain):
    expired = record.using(deadline=timezone.now() - dt.timedelta(minutes=1)).enqueue(note="x")
    in_time = record.using(deadline=dt.timedelta(hours=1)).enqueue(note="y")

    drain()

    expired = fresh(expired)
    assert (expired.status, expired.attempt) == ("failed", 1)
    assert [e["type"] for e in expired.errors] == [f"{EXC}.DeadlineExceeded"]
    assert ledger(expired) == []
    assert fresh(in_time).status == "succeeded"
    assert ledger(in_time) == [(1, "y")]


# --- the worker process and its connections -----------------------------------------------


def test_worker_process_row_exists_while_running_and_is_removed_after_stop(background_worker):
    worker = background_worker(queues=["default", "mail"], concurrency=3)

    row = WorkerProcess.objects.get(pk=worker.id)
    assert (row.pid, row.queues, row.concurrency) == (os.getpid(), ["default", "mail"], 3)
    assert row.host == socket.gethostname()
    assert len(worker.id) == 36  # a fresh uuid4 per start, never a hostname

    worker.stop()
    wait_until(lambda: not WorkerProcess.objects.filter(pk=worker.id).exists(), timeout=15)


@pytest.mark.postgres_only  # application_name and pg_stat_activity are PostgreSQL's
def test_every_connection_of_a_worker_carries_its_name(background_worker):
    """Every connection a worker opens is named ``workqueue:<worker id>`` (PostgreSQL's
    ``application_name``), its listener's too: ``pg_stat_activity`` shows which backends are
    whose (the fault battery counts a worker's connection budget that way)."""
    worker = background_worker(concurrency=2, poll_interval=0.05)
    held = [sleep_for.enqueue(1.5), sleep_for.enqueue(1.5)]  # each slot opens its connection
    wait_until(lambda: Job.objects.filter(status="running").count() == 2, timeout=20)
    name = f"workqueue:{worker.id}"

    def sessions() -> list[tuple[str, str]]:
        """(application_name, last query) of every other session of the test database (this
        test's own database: only this test's worker connects to it)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT application_name, query FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            )
            return cursor.fetchall()

    def queries_when_all_four_are_up() -> list[str] | None:
        queries = [query for app, query in sessions() if app == name]
        return queries if len(queries) == 4 else None

    # The control thread, two slots and the listener: concurrency + 2, all named.
    queries = wait_until(queries_when_all_four_are_up, timeout=20, message="4 named sessions")
    assert sum(query.startswith("LISTEN") for query in queries) == 1
    # No session without the name (a stopped worker of an earlier test lets go within 1 s).
    wait_until(lambda: all(app == name for app, _ in sessions()), timeout=10)
    for job in held:
        wait_until(lambda job=job: fresh(job).status == "succeeded", timeout=30)
    later = record.enqueue("after")  # later jobs reuse the slots' connections: no new ones
    wait_until(lambda: fresh(later).status == "succeeded", timeout=30)
    assert len([app for app, _ in sessions() if app == name]) == 4


def test_no_connection_is_left_inside_an_atomic_block(background_worker):
    effects = atomic_effect.enqueue_many([((), {"value": str(n)}) for n in range(3)])
    failing = atomic_effect.using(max_attempts=1).enqueue_many(
        [((), {"value": "x", "fail": True}) for _ in range(3)]
    )
    probes = connection_state.using(priority=-10).enqueue_many([((), {})] * 6)
    jobs = [*effects, *failing, *probes]

    # A background worker, so its slot connections are still open when we look at them.
    background_worker(concurrency=3)
    wait_until(lambda: Job.objects.finished().count() == len(jobs), timeout=20)

    for probe in probes:
        probe = fresh(probe)
        assert probe.status == "succeeded"
        assert (probe.result["in_atomic_block"], probe.result["autocommit"]) == (False, True)
    assert [fresh(job).status for job in failing] == ["failed"] * 3
    assert Effect.objects.filter(value="x").count() == 0
    assert Effect.objects.exclude(value="x").count() == 3
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%%'"
            )
            assert cursor.fetchone()[0] == 0
    else:
        # A slot left inside a transaction would hold SQLite's write lock: this would time out.
        LedgerEntry.objects.create(job_id=0, attempt=0, pid=0, note="write lock is free")


def test_a_slot_recovers_after_a_task_leaks_an_open_transaction(drain):
    leaks_transaction.using(priority=10).enqueue()
    probes = connection_state.enqueue_many([((), {})] * 3)

    drain(concurrency=1)  # one slot: the probes run on the thread that ran the leaky task

    for probe in probes:
        probe = fresh(probe)
        assert probe.status == "succeeded", probe.errors
        assert probe.result["in_atomic_block"] is False
