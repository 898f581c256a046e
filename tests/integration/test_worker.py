"""The worker, in process: slot threads run jobs and record their outcomes (SQLite and PostgreSQL).

Workers run on threads (``drain`` in this thread until nothing is ready, ``background_worker``
on its own thread), so every test here uses committed data: ``transaction=True``.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading

import pytest
from django.db import DataError, OperationalError, connection, transaction
from django.utils import timezone

from django_workqueue.models import Job, WorkerProcess
from django_workqueue.outcomes import Outcome, OutcomeKind
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from testproject.testapp.models import Effect, LedgerEntry
from testproject.testapp.tasks import (
    add,
    atomic_effect,
    record,
    send_mail,
    sleep_for,
)
from tests.support.database import fresh, ledger_order
from tests.support.settings import workqueue_settings
from tests.support.tasks import (
    connection_state,
    leaks_transaction,
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
    claim: where runworker's stop lands when a SIGTERM comes in mid-pass (its signal thread
    stops the worker while the control thread goes on with the pass)."""

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


class ScriptedPasses(Worker):
    """Each pass "claims" one job for its free slots; ``full`` says, pass by pass, whether
    that claim came back full (the planner's ``backlog``). ``steps`` notes the passes and the
    waits for a wake-up between them; the pass after the script stops the worker."""

    def __init__(self, full: list[bool], **options) -> None:
        super().__init__(**options)
        self.full, self.steps = full, []
        steps = self.steps

        class NotedWake(threading.Event):
            def wait(self, timeout: float | None = None) -> bool:
                steps.append("wait")
                return True  # woken at once: the test is the order, not the time

        self.wake = NotedWake()

    def _tick(self) -> int:
        self.steps.append("pass")
        if not self.full:
            self.stop()
            return 0
        self.planner.backlog = self.full.pop(0)
        return 1


def test_a_claim_that_came_back_short_waits_for_a_wake_up_before_the_next_pass():
    """A full claim is followed by another pass at once (more may be ready); one that came
    back short is not: the slots it fed start while the control thread waits, instead of
    sharing the interpreter with a pass that would find nothing (issue 32: pickup). A job
    enqueued meanwhile announces itself (NOTIFY, or the poll)."""
    worker = ScriptedPasses([True, False], concurrency=4, grace_seconds=5)

    assert worker.run() == 0

    assert worker.steps[:4] == ["pass", "pass", "wait", "pass"]


def _hand_over(worker: Worker, outcome_of) -> list[int]:
    """Do what the slots do with every job the last pass handed them: each ended with
    ``outcome_of(job)``, which goes to the completer. Returns the jobs' ids."""
    ids = []
    while not worker._inbox.empty():
        job, item = worker._inbox.get_nowait()
        with worker._lock:
            worker._executing -= 1
            worker.pool.ended(job.queue)
            item.context.finished = True
            worker.completer.hand_over(outcome_of(job), item.started)
        ids.append(job.id)
    return ids


def _retry(job) -> Outcome:
    """It failed, to be retried without delay."""
    return Outcome(
        job_id=job.id, attempt=job.attempt, kind=OutcomeKind.RETRY,
        max_attempts=job.max_attempts, attempts_charged=job.attempts_charged, delay=0.0,
        error={"type": "ValueError", "message": "again", "traceback": None},
    )  # fmt: skip


def _success(job) -> Outcome:
    return Outcome(
        job_id=job.id, attempt=job.attempt, kind=OutcomeKind.SUCCEEDED,
        max_attempts=job.max_attempts, result_json="3",
    )  # fmt: skip


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_job_its_pass_wrote_back_is_claimed_by_that_pass_or_the_next_at_once(pool):
    """A pass writes the outcomes slots handed over and claims for the free slots. A thread
    pool writes first, so what the write put back (a retry without delay) is claimed in the
    same pass, and nothing is left to wake a pass more. A process pool claims first (its
    children wait for the claim, not the write): its pass wakes the next one at once, which
    claims the job instead of waiting for the poll."""
    job = add.enqueue(1, 2)
    worker = Worker(concurrency=1, pool=pool, poll_interval=3600)
    if worker.processes is not None:
        worker.processes.ready.set()  # no children in this test: the slots' work is done here
    assert worker._tick() == 1
    _hand_over(worker, _retry)
    worker.wake.clear()

    claimed = worker._tick()

    assert fresh(job).errors[-1]["message"] == "again"
    if pool == "threads":
        assert (claimed, worker.wake.is_set()) == (1, False)
    else:
        assert (claimed, worker.wake.is_set()) == (0, True)
        assert worker._tick() == 1
    assert (fresh(job).status, fresh(job).attempt) == (Status.RUNNING, 2)


# --- one pass, one transaction -----------------------------------------------------------


class Transactions:
    """What one connection sends: each statement, and whether it ran inside a transaction
    (otherwise it was a transaction of its own), and how many transactions committed."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, bool]] = []
        self.commits = 0

    def __call__(self, execute, sql, params, many, context):  # an execute_wrapper
        self.statements.append((sql, context["connection"].in_atomic_block))
        return execute(sql, params, many, context)

    @property
    def count(self) -> int:
        # SQLite's BEGIN IMMEDIATE comes through here too: it opens the transaction counted
        # by its commit.
        alone = [sql for sql, inside in self.statements if not inside and sql != "BEGIN IMMEDIATE"]
        return self.commits + len(alone)


@pytest.fixture
def transactions(monkeypatch) -> Transactions:
    seen = Transactions()
    commit = connection.commit

    def counted() -> None:
        seen.commits += 1
        commit()

    monkeypatch.setattr(connection, "commit", counted)
    return seen


def test_a_pass_writes_its_outcomes_and_claims_the_next_jobs_in_one_transaction(
    transactions, monkeypatch
):
    """However many outcomes a pass writes and jobs it claims: one transaction, one commit.
    The write comes first (the lock order: workflow rows, then jobs), the claim after it.
    (A process pool claims first, each on its own: see the test above.)"""
    first = [add.enqueue(i, 1) for i in range(3)]
    worker = Worker(concurrency=3, poll_interval=3600)
    monkeypatch.setattr(worker.maintainer, "run_if_due", lambda: False)  # its own transactions
    assert worker._tick() == 3
    assert sorted(_hand_over(worker, _success)) == sorted(job.pk for job in first)
    following = [add.enqueue(i, 2) for i in range(3)]
    transactions.statements.clear()
    transactions.commits = 0

    with connection.execute_wrapper(transactions):
        claimed = worker._tick()

    assert claimed == 3
    assert {fresh(job).status for job in first} == {Status.SUCCEEDED}
    assert {fresh(job).status for job in following} == {Status.RUNNING}
    assert transactions.count == 1, transactions.statements
    assert worker.completer.pending == 0 and worker._inbox.qsize() == 3


def _an_outcome_to_write_and_a_job_to_claim(concurrency: int = 1) -> tuple[Worker, Job, Job]:
    """A worker whose last pass claimed a job that has succeeded since (its outcome handed
    over, not written yet), and another job ready."""
    first = add.enqueue(1, 1)
    worker = Worker(concurrency=concurrency, poll_interval=3600)
    assert worker._tick() == 1
    _hand_over(worker, _success)
    return worker, first, add.enqueue(2, 2)


def _the_next_pass_writes_and_claims(worker: Worker, first: Job, following: Job) -> None:
    worker._error_backoff = 0.0

    assert worker._tick() == 1

    assert fresh(first).status == Status.SUCCEEDED
    assert (fresh(following).status, fresh(following).attempt) == (Status.RUNNING, 1)
    assert worker.completer.pending == 0 and worker._inbox.qsize() == 1


def test_a_pass_whose_claim_fails_with_the_connection_keeps_its_outcomes_and_starts_nothing(
    monkeypatch,
):
    """The claim runs in the write's transaction: a lost connection rolls both back. Nothing
    is lost: the outcomes wait for the next pass, the rows it claimed are ready again, and no
    job starts on a claim that did not commit."""
    worker, first, following = _an_outcome_to_write_and_a_job_to_claim()
    # The pass's transaction (a pass of plain jobs on PostgreSQL may be one statement instead,
    # whose failure test_worker_one_statement.py covers).
    monkeypatch.setattr(worker.driver, "supports_record_and_claim", False)
    claim = worker.claimer.claim

    def claim_then_lose_the_connection(queues, limit):
        jobs = claim(queues, limit)
        assert jobs  # claimed in the pass's transaction ...
        raise OperationalError("server closed the connection unexpectedly")  # ... then lost

    monkeypatch.setattr(worker.claimer, "claim", claim_then_lose_the_connection)

    assert worker._tick() == 0

    assert (fresh(first).status, fresh(first).lease_owner) == (Status.RUNNING, worker.id)
    assert (fresh(following).status, fresh(following).attempt) == (Status.READY, 0)
    assert worker.completer.pending == 1 and worker._inbox.empty()
    assert worker._connection_lost and worker.claimed_count == 1
    monkeypatch.undo()

    _the_next_pass_writes_and_claims(worker, first, following)


@pytest.mark.postgres_only  # pg_terminate_backend: the server ends the pass's session
def test_a_pass_whose_session_the_server_ends_before_its_claim_loses_nothing(monkeypatch):
    """The server ends the control connection's session after the pass wrote its outcomes and
    before it claims: nothing of the transaction was kept, so the outcomes are written by the
    next pass, and the job is claimed then."""
    worker, first, following = _an_outcome_to_write_and_a_job_to_claim()
    claim = worker.claimer.claim
    ended = []

    def end_the_session_then_claim(queues, limit):
        if not ended:
            # The backend serving the pass's open transaction: asked of the server, since
            # through a pooler the client's own idea of it (``info.backend_pid``) is the pooler's.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                ended.append(cursor.fetchone()[0])
            terminator = threading.Thread(target=_terminate, args=(ended[0],))
            terminator.start()
            terminator.join()
        return claim(queues, limit)

    monkeypatch.setattr(worker.claimer, "claim", end_the_session_then_claim)

    assert worker._tick() == 0

    assert ended and worker._connection_lost
    assert (fresh(first).status, fresh(first).lease_owner) == (Status.RUNNING, worker.id)
    assert fresh(following).status == Status.READY
    assert worker.completer.pending == 1 and worker._inbox.empty()

    _the_next_pass_writes_and_claims(worker, first, following)


def _terminate(pid: int) -> None:
    """From a session of its own (this thread's), end session ``pid`` as a restart would."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        connection.close()


def test_a_claim_that_fails_after_another_took_jobs_never_rolls_back_the_pass_unseen():
    """A pass's second claim (the flow claim after the plain one) fails after the first took
    jobs; the claimer lets it through, so that those jobs run. On PostgreSQL the failed
    statement has ended the pass's transaction, whose COMMIT would then roll back the
    outcomes' write unseen: the pass writes apart instead, then claims, and nothing is lost."""
    # Two slots for one ready job: the plain claim comes short, so the flow claim runs.
    worker, first, following = _an_outcome_to_write_and_a_job_to_claim(concurrency=2)
    worker.claimer.uses_flow = True
    worker.claimer._flow_first = True  # the next claim takes turns: the plain claim first

    failed = []

    def a_statement_fails(queues, limit):  # once
        if failed:
            return []
        failed.append(limit)
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table_of_flow_claims")

    worker.claimer.flow.claim = a_statement_fails

    assert worker._tick() == 1

    assert failed
    assert fresh(first).status == Status.SUCCEEDED
    assert (fresh(following).status, fresh(following).lease_owner) == (Status.RUNNING, worker.id)
    assert worker.completer.pending == 0 and worker._inbox.qsize() == 1


def test_a_pass_inside_a_callers_transaction_hands_its_jobs_over_at_once():
    """The jobs a pass claims start when its own transaction is over, not when an enclosing
    one commits (a test's): claimed inside a caller's transaction, they are handed over as
    the claim returns, as before passes had a transaction."""
    worker, first, following = _an_outcome_to_write_and_a_job_to_claim()
    with transaction.atomic():
        assert worker._tick() == 1  # writes and claims: a savepoint of the caller's
        assert worker._inbox.qsize() == 1 and worker.claimed_count == 2
        third = add.enqueue(3, 3)
        worker.concurrency = 2  # a free slot, and nothing to write: a claim alone
        worker._poll_now = True
        assert worker._tick() == 1
        assert worker._inbox.qsize() == 2 and worker.claimed_count == 3
    assert fresh(first).status == Status.SUCCEEDED
    assert {fresh(following).status, fresh(third).status} == {Status.RUNNING}


def test_a_pass_whose_batch_is_refused_writes_each_outcome_apart_and_still_claims(monkeypatch):
    """A value the database refuses ends the pass's transaction: the pass writes the outcomes
    one by one (the refused one replaced by a failure that says why), then claims."""
    bad, good = add.enqueue(1, 1), add.enqueue(2, 2)
    worker = Worker(concurrency=2, poll_interval=3600)
    assert worker._tick() == 2
    _hand_over(worker, _success)
    following = add.enqueue(3, 3)
    record_many = worker.driver.record_many
    monkeypatch.setattr(worker.driver, "supports_record_and_claim", False)  # as above

    def refusing(owner, outcomes, **kwargs):
        if any(outcome.job_id == bad.pk and outcome.kind == OutcomeKind.SUCCEEDED
               for outcome in outcomes):  # fmt: skip
            raise DataError("value out of range")  # what the database says to a bad value
        return record_many(owner, outcomes, **kwargs)

    monkeypatch.setattr(worker.driver, "record_many", refusing)

    assert worker._tick() == 1

    assert fresh(good).status == Status.SUCCEEDED
    assert fresh(bad).status in (Status.FAILED, Status.READY, Status.SCHEDULED)
    assert fresh(bad).errors  # the refusal, said
    assert fresh(following).status == Status.RUNNING
    assert worker.completer.pending == 0


def test_a_burst_ends_with_the_pass_that_writes_its_last_outcome():
    """The jobs whose outcomes a pass writes before it claims can put nothing back after it:
    a burst worker whose pass wrote the last outcome and claimed nothing is done."""
    add.enqueue(1, 1)
    worker = Worker(concurrency=1, burst=True, poll_interval=3600)
    assert worker._tick() == 1
    _hand_over(worker, _success)

    assert worker._tick() == 0

    assert worker._finished_work(0)


@pytest.mark.postgres_only  # row locks; SQLite locks the database, and writes wait for it
def test_a_pass_whose_write_meets_a_locked_row_keeps_that_outcome_and_still_claims(hold_row):
    """A row another session holds is skipped and its outcome kept for a later pass; the
    other outcomes and the claim commit in the pass's transaction."""
    locked, other = add.enqueue(1, 1), add.enqueue(2, 2)
    worker = Worker(concurrency=2, poll_interval=3600)
    assert worker._tick() == 2
    _hand_over(worker, _success)
    following = add.enqueue(3, 3)
    release = hold_row(locked.pk)

    assert worker._tick() == 1

    assert fresh(other).status == Status.SUCCEEDED
    assert fresh(following).status == Status.RUNNING
    assert worker.completer.pending == 1  # the locked job's, for a later pass
    release.set()
    wait_until(lambda: worker._tick() >= 0 and fresh(locked).status == Status.SUCCEEDED,
               timeout=10, message="the kept outcome")  # fmt: skip


# --- retries, backoff and the dead-letter queue -------------------------------------------


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
@pytest.mark.postgres_direct  # behind a pooler, sessions are not named (the pooler's are shared)
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


def test_a_delayed_job_starts_on_time_even_with_a_long_poll_interval(background_worker):
    # The worker sleeps up to its poll interval between passes; the promoter's interval bounds
    # that sleep, so a job scheduled for later becomes ready and runs within about
    # PROMOTE_INTERVAL of its time, not at the next poll a minute later.
    with workqueue_settings(PROMOTE_INTERVAL=0.2, HEARTBEAT_INTERVAL=30.0):
        background_worker(concurrency=1, poll_interval=60.0)
        job = add.using(delay=0.5).enqueue(2, 3)
        assert fresh(job).status == "scheduled"
        wait_until(lambda: fresh(job).status == "succeeded", timeout=5, message="the delayed job")
