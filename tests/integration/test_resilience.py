"""One bad value, one locked row or one dropped connection must not stall a worker.

Text the database cannot store (NUL, lone surrogates) is refused at enqueue, and in a result, an
error or a progress message it fails that job alone; a row another session keeps locked delays
no other job's heartbeat; a lost connection is retried at the backoff pace, and connections
dropped by a database restart cost the next jobs nothing; a redrive leaves alone a job whose
unique key is held.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import OperationalError, connection, connections

from django_workqueue import operations
from django_workqueue.db import driver_for
from django_workqueue.exceptions import PayloadNotJSON
from django_workqueue.models import Job
from testproject.testapp.tasks import add, record, sleep_for
from tests.support.database import fresh
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.tasks import raises_unstorable, returns_nul
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_text_the_database_cannot_store_is_refused_at_enqueue():
    with pytest.raises(PayloadNotJSON, match="NUL character"):
        add.enqueue("a\x00b", 1)
    with pytest.raises(PayloadNotJSON, match="lone surrogate"):
        add.enqueue({"k": "x\ud800"}, 1)
    assert not Job.objects.exists()


def test_unstorable_result_error_and_progress_never_wedge_the_worker(drain):
    bad_result = returns_nul.enqueue()
    bad_error = raises_unstorable.enqueue()
    after = add.enqueue(1, 2)

    drain(concurrency=1)

    bad_result, bad_error, after = fresh(bad_result), fresh(bad_error), fresh(after)
    assert (after.status, after.result) == ("succeeded", 3)
    assert bad_result.status == "failed"
    assert bad_result.errors[-1]["type"] == "django_workqueue.exceptions.ResultNotJSON"
    assert "NUL character" in bad_result.errors[-1]["message"]
    assert bad_error.status == "failed"
    [error] = bad_error.errors
    assert error["type"] == "builtins.ValueError"
    assert error["message"] == "bad\\x00byte and \\ud800 surrogate"
    assert bad_error.progress_message == "row\\x00one"


def test_redrive_leaves_a_job_whose_unique_key_is_held_and_redrives_the_rest():
    held = JobFactory(failed=True, unique_key="invoice-7")
    JobFactory(unique_key="invoice-7")  # an active job of the same task holds the key
    free = JobFactory(failed=True, unique_key="invoice-8")
    plain = JobFactory(failed=True)

    result = operations.redrive()

    assert result.count == 2
    assert "1 left failed" in result.message
    assert fresh(held).status == "failed"
    assert (fresh(free).status, fresh(plain).status) == ("ready", "ready")


@pytest.mark.postgres_only  # row locks held by another session exist on PostgreSQL only
@pytest.mark.parametrize(
    ("heartbeat", "reaper", "locked_seconds"),
    [
        (0.2, 0.2, 4.0),
        # The locked job is still running when the lock is gone, its lease lapsed meanwhile
        # (renewals skip locked rows), and the reaper runs far more often than the heartbeat:
        # it would take the job from its live owner before the next renewal, unless the
        # worker renews its own leases before it reaps.
        (0.6, 0.05, 8.0),
    ],
)
def test_a_row_locked_by_another_session_does_not_stall_the_heartbeat(
    background_worker, heartbeat, reaper, locked_seconds
):
    with workqueue_settings(HEARTBEAT_INTERVAL=heartbeat, REAPER_INTERVAL=reaper):
        worker = background_worker(concurrency=2, poll_interval=0.05)
        locked = sleep_for.enqueue(locked_seconds)
        other = sleep_for.enqueue(4.0)
        wait_until(lambda: Job.objects.filter(status="running").count() == 2)
        holding = threading.Event()
        release = threading.Event()

        def hold_row_lock():
            with connections["default"].cursor() as cursor:
                cursor.execute("BEGIN")
                cursor.execute(
                    "SELECT id FROM django_workqueue_job WHERE id = %s FOR UPDATE", [locked.pk]
                )
                holding.set()
                release.wait(30)
                cursor.execute("ROLLBACK")
            connections["default"].close()

        holder = threading.Thread(target=hold_row_lock)
        holder.start()
        try:
            assert holding.wait(10)
            # Longer than both leases (2 s): without renewals while the row is locked, the
            # other job's lease would expire and the reaper would take it back.
            wait_until(lambda: fresh(other).status == "succeeded", timeout=30)
        finally:
            release.set()
            holder.join(30)
        wait_until(lambda: fresh(locked).status == "succeeded", timeout=30)
        assert (fresh(locked).attempt, fresh(other).attempt) == (1, 1)
        assert worker.finished_count == 2


@pytest.mark.postgres_only  # pg_terminate_backend: a database restart, as seen by PostgreSQL
def test_dropped_connections_do_not_charge_the_next_jobs(background_worker):
    worker = background_worker(concurrency=2, poll_interval=0.05)
    # These tasks use the database from the slot thread, so each slot holds a connection.
    warmup = [record.enqueue("warm-up") for _ in range(4)]
    wait_until(lambda: all(fresh(job).status == "succeeded" for job in warmup))
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    jobs = [record.using(max_attempts=1).enqueue("after") for _ in range(6)]
    wait_until(lambda: all(fresh(job).status != "ready" for job in jobs), timeout=30)
    wait_until(lambda: all(fresh(job).status == "succeeded" for job in jobs), timeout=30)
    assert worker.finished_count >= 10


def test_jobs_a_claim_leased_with_its_answer_lost_go_back_uncharged_after_the_reconnect(
    background_worker,
):
    """A claim that commits while its answer is lost with the connection leases jobs to a
    worker that never learns of them: once reconnected, the worker gives them back to ready at
    once, uncharged (their bodies never began), instead of leaving them to expire and be
    reaped a lease later with a crash charged. A job it does hold is left running, and so is
    one an earlier process of the same worker id left (its body may have begun: the reaper's,
    with its crash charged)."""
    earlier = record.using(queue="mail").enqueue("an earlier process's")
    driver = driver_for("default")
    assert [job.id for job in driver.claim(["mail"], 1, "same-id")] == [earlier.id]
    worker = background_worker(
        concurrency=1, queues=["default"], poll_interval=0.05, worker_id="same-id"
    )
    held = sleep_for.enqueue(3)
    wait_until(lambda: fresh(held).status == "running", timeout=20)
    lost = record.using(queue="mail").enqueue("never seen")  # a queue this worker does not serve
    # What the lost claim did: committed on the server, its answer never reached the worker.
    assert [job.id for job in driver.claim(["mail"], 1, worker.id)] == [lost.id]
    failing = True
    ensure_session = worker._ensure_session

    def reconnecting() -> None:  # the lost answer surfaced as the connection's error
        nonlocal failing
        if failing:
            failing = False
            raise OperationalError("server closed the connection unexpectedly")
        ensure_session()

    worker._ensure_session = reconnecting
    # Well within the job's 60 s lease: only a give-back, not the reaper, can do it.
    wait_until(lambda: fresh(lost).status == "ready", timeout=10, message="given back")
    lost = fresh(lost)
    assert (lost.lease_owner, lost.attempts_charged, lost.crashes_charged) == (None, 0, 0)
    held_now = fresh(held)
    assert (held_now.status, held_now.lease_owner, held_now.attempt) == (
        "running", worker.id, 1,
    )  # fmt: skip
    assert (fresh(earlier).status, fresh(earlier).lease_owner) == ("running", "same-id")
    wait_until(lambda: fresh(held).status == "succeeded", timeout=30)
    assert fresh(held).crashes_charged == 0


def test_a_lost_connection_is_retried_at_the_backoff_pace(background_worker):
    """While the database refuses connections, the worker retries at its backoff (doubling,
    capped at the renewal interval), also once a lease renewal is due; retrying every pass
    would make some 20 connection attempts per second against a database that is down, while
    the log says "retrying in 5.0s". Vendor-neutral, so it runs on both databases."""
    worker = background_worker(concurrency=1, poll_interval=0.05)
    job = sleep_for.enqueue(2.5)  # a 2 s lease: a renewal is due every 0.67 s while it runs
    wait_until(lambda: fresh(job).status == "running", timeout=20)
    attempts: list[float] = []
    refusing = True
    ensure_session = worker._ensure_session

    def refused() -> None:  # what a stopped or refusing server answers
        if refusing:
            attempts.append(time.monotonic())
            raise OperationalError("connection failed: Connection refused")
        ensure_session()

    worker._ensure_session = refused
    try:
        wait_until(lambda: len(attempts) >= 8, timeout=30, message="8 attempts to reconnect")
    finally:
        refusing = False
    # The backoff doubles from 0.1 s, capped by the renewal interval (0.67 s here): the eighth
    # attempt comes 0.1 + 0.2 + 0.4 + 4 x 0.67 = 3.4 s after the first; retries 50 ms apart
    # once a renewal is due would bring it 0.8 s after.
    assert attempts[7] - attempts[0] >= 2.5, [round(t - attempts[0], 2) for t in attempts]
    wait_until(lambda: fresh(job).status == "succeeded", timeout=30)
