"""A worker's pass of plain jobs on PostgreSQL: its outcomes' write, their statistics and its
claim in one autocommitted statement (``Driver.record_and_claim``); every other pass keeps its
transaction (``test_worker.py``). PostgreSQL-only by design where the one statement is
concerned: SQLite keeps one transaction per pass, which the last test checks on both.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db import DataError, OperationalError, connection, transaction
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from django_workqueue import signals
from django_workqueue.db import driver_for
from django_workqueue.models import Job, StatsCounter
from django_workqueue.outcomes import Outcome, OutcomeKind
from django_workqueue.registry import find_task
from django_workqueue.states import Status
from django_workqueue.stats import counters, histogram
from django_workqueue.worker.runner import Worker
from django_workqueue.workflow import chain, release
from testproject.testapp.tasks import add
from tests.integration.test_worker import _hand_over, _retry, _success
from tests.support.database import fresh

pytestmark = pytest.mark.django_db(transaction=True)

OUTCOME_SIGNALS = (signals.job_succeeded, signals.job_failed, signals.job_cancelled,
                   signals.job_retrying, signals.job_snoozed)  # fmt: skip


@pytest.fixture(autouse=True)
def only_our_outcome_listeners(monkeypatch):
    """A process whose outcome-signal receivers and statistics listeners are those the test
    connects (one another test left registered, such as realtime's, would add statements of
    its own to the passes counted here), and with no flow-limited task, as a worker without
    flow control: with one, every pass claims through the flow claim, in the pass's
    transaction (a test module may register one at import)."""
    for signal in OUTCOME_SIGNALS:
        monkeypatch.setattr(signal, "receivers", [])
        monkeypatch.setattr(signal, "sender_receivers_cache", {})
    monkeypatch.setattr(counters, "_listeners", [])
    monkeypatch.setattr("django_workqueue.flow.claimer.uses_flow_claim", lambda: False)


@pytest.fixture(autouse=True)
def no_batch_tasks(monkeypatch):
    """A project without batch tasks (the test project's would make every pass claim batches
    too, which keeps the pass's transaction)."""
    for module in ("django_workqueue.worker.batch", "django_workqueue.flow.batches"):
        monkeypatch.setattr(f"{module}.batch_groups", lambda queues: [])


def _worker_with_outcomes(monkeypatch, outcome_of=_success, jobs=3) -> tuple[Worker, list[Job]]:
    """A worker whose last pass claimed ``jobs`` jobs that have ended since (their outcomes
    handed over, not written), with as many jobs ready for its next pass."""
    first = [add.enqueue(i, 1) for i in range(jobs)]
    worker = Worker(concurrency=jobs, poll_interval=3600)
    monkeypatch.setattr(worker.maintainer, "run_if_due", lambda: False)  # its own statements
    worker.claimer._next_stray_look = math.inf  # the flow claim's look for strays: not now
    assert worker._tick() == jobs
    _hand_over(worker, outcome_of)
    return worker, first


def _statements(captured: CaptureQueriesContext) -> list[str]:
    return [query["sql"] for query in captured.captured_queries]


def _listen() -> tuple[list[tuple[Any, Any, dict[str, Any]]], list[tuple[list, Any]]]:
    """Connect a receiver to every outcome signal and a statistics listener (both emptied
    again by ``only_our_outcome_listeners``); returns what they hear: (signal, sender,
    kwargs) for each signal sent, (outcomes, recorded) for each batch told."""
    heard: list[tuple[Any, Any, dict[str, Any]]] = []
    told: list[tuple[list, Any]] = []

    def receiver(signal, sender, **kwargs) -> None:
        heard.append((signal, sender, kwargs))

    for signal in OUTCOME_SIGNALS:
        signal.connect(receiver, weak=False)
    counters.add_listener(lambda outcomes, recorded: told.append((list(outcomes), recorded)))
    return heard, told


@pytest.mark.postgres_only  # the one statement is PostgreSQL's
@pytest.mark.parametrize("listening", [False, True], ids=["alone", "signals and metrics on"])
def test_a_pass_of_plain_jobs_is_one_statement(monkeypatch, listening):
    """The outcomes' write, their statistics and the claim: one statement, no BEGIN/COMMIT,
    whoever listens (the django.tasks bridge, realtime, a worker's metrics): they hear of
    the outcomes after it, as they would after the pass's transaction commits."""
    worker, first = _worker_with_outcomes(monkeypatch)
    following = [add.enqueue(i, 2) for i in range(3)]
    heard, told = _listen() if listening else ([], [])

    with CaptureQueriesContext(connection) as captured:
        claimed = worker._tick()

    assert len(_statements(captured)) == 1, _statements(captured)
    assert claimed == 3
    assert {fresh(job).status for job in first} == {Status.SUCCEEDED}
    assert {fresh(job).status for job in following} == {Status.RUNNING}
    assert worker.completer.pending == 0 and worker._inbox.qsize() == 3
    counted = StatsCounter.objects.filter(name="succeeded").values_list("count", flat=True)
    assert sum(counted) == 3
    if listening:
        assert [(s, k["job_id"]) for s, _, k in heard] == [
            (signals.job_succeeded, job.pk) for job in first
        ]
        assert len(told) == 1 and len(told[0][1].written) == 3


@pytest.mark.postgres_only  # the one statement is PostgreSQL's
@pytest.mark.postgres_direct  # reads the server session's prepared statements
def test_a_workers_pass_is_planned_once_after_its_first_five(monkeypatch):
    """The pass's statement runs prepared; PostgreSQL keeps its generic plan from the sixth
    pass on, as it does only if that plan is estimated no dearer than the custom plans of
    the first five (the claim's queues and limit are unknown to both): the pass is not
    planned again on every call (docs/explanation/performance.md). With a backlog the
    table's statistics show, a generic plan guesses the limit at a tenth of it."""
    worker, _ = _worker_with_outcomes(monkeypatch, jobs=2)
    add.enqueue_many([((i, 2), {}) for i in range(5000)])
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")
        cursor.execute("DEALLOCATE ALL")  # psycopg sees it and forgets what it had prepared
    for _ in range(8):
        assert worker._tick() == 2
        _hand_over(worker, _success)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE %s",
            ["%INSERT INTO django_workqueue_statscounter%picked AS MATERIALIZED%"],
        )
        assert cursor.fetchall() == [(3, 5)]
    assert Job.objects.filter(status=Status.SUCCEEDED).count() == 16  # 2 + 7 passes of 2


_KINDS = (OutcomeKind.SUCCEEDED, OutcomeKind.DISCARD, OutcomeKind.CANCELLED,
          OutcomeKind.DISCARD, OutcomeKind.SUCCEEDED)  # fmt: skip


def _ending(kinds: dict[int, OutcomeKind]):
    def ending(job) -> Outcome:
        kind = kinds[job.id]
        discarded = kind == OutcomeKind.DISCARD
        return Outcome(
            job_id=job.id, attempt=job.attempt, kind=kind, max_attempts=job.max_attempts,
            result_json="2" if kind == OutcomeKind.SUCCEEDED else None,
            error={"type": "ValueError", "message": f"no {job.id}", "traceback": None}
            if discarded else None, task_name=job.task_name, queue=job.queue,
        )  # fmt: skip

    return ending


@pytest.mark.parametrize(
    "path", [pytest.param("one statement", marks=pytest.mark.postgres_only), "transaction"]
)
def test_outcome_receivers_and_listeners_hear_the_same_on_both_paths(monkeypatch, path):
    """A pass of plain endings: a success, a discard, a cancellation, a discard of a job
    whose cancellation was requested while it ran (the row says cancelled), and a success
    whose lease another worker holds now (the fence refuses it). Written in one statement
    (PostgreSQL) or in the pass's transaction, every receiver hears the status each row took,
    once and after the write, and nothing of the refused one; the statistics listener hears
    the batch once, with what was written."""
    jobs = [add.enqueue(i, 1) for i in range(len(_KINDS))]
    worker = Worker(concurrency=len(jobs), poll_interval=3600)
    monkeypatch.setattr(worker.maintainer, "run_if_due", lambda: False)
    worker.claimer._next_stray_look = math.inf
    assert worker._tick() == len(jobs)
    kinds = {job.pk: kind for job, kind in zip(jobs, _KINDS, strict=True)}
    handed = _hand_over(worker, _ending(kinds))
    Job.objects.filter(pk=jobs[3].pk).update(cancel_requested_at=Now())
    Job.objects.filter(pk=jobs[4].pk).update(lease_owner="another-worker")
    heard, told = _listen()
    seen: list[str] = []  # the row's status when its signal arrived
    signals.job_succeeded.connect(lambda job_id, **_: seen.append(fresh_status(job_id)),
                                  weak=False)  # fmt: skip
    statements = []
    if path == "transaction":
        monkeypatch.setattr(worker, "_in_one_statement", lambda outcomes: False)
    else:
        one_statement = worker.driver.record_and_claim

        def counted(*args, **kwargs):
            statements.append(args)
            return one_statement(*args, **kwargs)

        monkeypatch.setattr(worker.driver, "record_and_claim", counted)

    worker._tick()

    assert len(statements) == (1 if path == "one statement" else 0)
    assert sorted(handed) == sorted(job.pk for job in jobs)
    task = find_task(jobs[0].task_name)
    assert task is not None

    def sent(signal, job, **more):
        return (signal, task, {"job_id": job.pk, "task_name": job.task_name, "queue": "default",
                               "attempt": 1, "worker_id": worker.id, **more})  # fmt: skip

    error = {"type": "ValueError", "message": f"no {jobs[1].pk}", "traceback": None}
    assert heard == [
        sent(signals.job_succeeded, jobs[0]),
        sent(signals.job_failed, jobs[1], error=error),
        sent(signals.job_cancelled, jobs[2]),
        sent(signals.job_cancelled, jobs[3]),
    ]
    assert seen == [Status.SUCCEEDED]  # written (and committed) when it was sent
    assert len(told) == 1
    outcomes, recorded = told[0]
    assert sorted((o.job_id, o.kind) for o in outcomes) == sorted(
        (job.pk, kind) for job, kind in zip(jobs, _KINDS, strict=True)
    )
    assert recorded.written == {(job.pk, 1) for job in jobs[:4]}
    statuses = [Status.SUCCEEDED, Status.FAILED, Status.CANCELLED, Status.CANCELLED]
    assert sorted((e.id, e.status) for e in recorded.ended) == [
        (job.pk, status) for job, status in zip(jobs, statuses, strict=False)
    ]
    assert sorted((t.id, t.status) for t in recorded.timings) == [
        (job.pk, status) for job, status in zip(jobs, statuses, strict=False)
    ]
    assert fresh(jobs[4]).status == Status.RUNNING  # the other worker's


def fresh_status(job_id: int) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job_id)


def test_a_running_job_named_as_a_prerequisite_releases_its_dependent(monkeypatch):
    """A job claimed outside any workflow joins one while it runs (``using(depends_on=...)``
    of a running job): its worker's copy still says no workflow, so the one statement, which
    writes no workflow effects, must leave that row for a pass that does, and the dependent
    is released when the job ends. (On SQLite every pass is that pass.)"""
    first = [add.enqueue(i, 1) for i in range(3)]
    worker = Worker(concurrency=3, poll_interval=3600)
    monkeypatch.setattr(worker.maintainer, "run_if_due", lambda: False)
    worker.claimer._next_stray_look = math.inf
    assert worker._tick() == 3
    dependent = add.using(depends_on=[first[0]]).enqueue(5, 5)
    assert fresh(dependent).status == Status.BLOCKED
    _hand_over(worker, _success)

    worker._tick()  # the one statement writes the others and keeps first[0]'s outcome
    worker._tick()  # the pass's transaction writes it, with its workflow's effects

    assert {fresh(job).status for job in first} == {Status.SUCCEEDED}
    assert fresh(dependent).status in {Status.READY, Status.RUNNING}  # released (and claimed)
    assert worker.completer.pending == 0
    counted = StatsCounter.objects.filter(name="succeeded").values_list("count", flat=True)
    assert sum(counted) == 3


def test_a_setting_the_worker_cannot_work_with_stops_it(monkeypatch):
    """A claim refused for a setting (``ImproperlyConfigured``: behind a pooler that loses
    prepared statements, say) would fail the same way on every pass: the worker stops with
    the reason, and runworker exits 1 with it, instead of backing off forever."""
    from django.core.exceptions import ImproperlyConfigured

    add.enqueue(1, 1)
    worker = Worker(concurrency=2, poll_interval=0.05)

    def refused(queues, limit):
        raise ImproperlyConfigured("a prepared statement was lost between server connections")

    monkeypatch.setattr(worker.claimer, "claim", refused)
    assert worker.run() == 0  # it returns: no backoff loop
    assert worker.misconfigured is not None
    assert "prepared statement was lost" in worker.misconfigured


@pytest.mark.postgres_only
def test_jobs_the_kept_statement_claimed_start_even_if_the_pass_fails_after_it(monkeypatch):
    """The statement commits on its own: what it claimed is this worker's, so a failure later
    in the pass (here the claim ahead's step) still starts those jobs, and the outcomes it
    wrote are settled, not put back."""
    worker, first = _worker_with_outcomes(monkeypatch)
    following = [add.enqueue(i, 2) for i in range(3)]

    def fails(room, *, full):
        raise RuntimeError("after the statement")

    monkeypatch.setattr(worker.planner, "claim_ahead", fails)
    worker._tick()  # the step's failure is logged, and the worker backs off

    assert worker._error_backoff > 0

    assert {fresh(job).status for job in first} == {Status.SUCCEEDED}
    assert {fresh(job).status for job in following} == {Status.RUNNING}
    assert worker.completer.pending == 0
    assert worker._inbox.qsize() == 3  # handed to the slots, not left to their lease


@pytest.mark.postgres_only
def test_a_pass_that_claims_nothing_writes_and_counts_in_one_statement(monkeypatch):
    worker, first = _worker_with_outcomes(monkeypatch)

    with CaptureQueriesContext(connection) as captured:
        assert worker._tick() == 0

    assert len(_statements(captured)) == 1, _statements(captured)
    assert {fresh(job).status for job in first} == {Status.SUCCEEDED}
    assert worker.completer.pending == 0 and len(worker.ledger) == 0


@pytest.mark.postgres_only
@pytest.mark.parametrize("transient", [True, False])
def test_a_failing_statement_puts_the_outcomes_back_and_starts_nothing(monkeypatch, transient):
    """Nothing of a statement that failed was kept: its outcomes wait for the next write (a
    lost connection: the next pass; a refusal: written apart at once, then a claim of its
    own), and no job starts on its claim."""
    worker, first = _worker_with_outcomes(monkeypatch, jobs=1)
    following = add.enqueue(2, 2)
    error = OperationalError("server closed the connection") if transient else DataError("no")
    sent = []

    def failing(owner, write, queues, limit):
        sent.append(len(write.outcomes))
        raise error

    monkeypatch.setattr(worker.driver, "record_and_claim", failing)

    claimed = worker._tick()

    assert sent == [1]
    if transient:
        assert claimed == 0 and worker._connection_lost
        assert (fresh(first[0]).status, fresh(first[0]).lease_owner) == (Status.RUNNING, worker.id)
        assert (fresh(following).status, fresh(following).attempt) == (Status.READY, 0)
        assert worker.completer.pending == 1 and worker._inbox.empty()
        monkeypatch.undo()
        worker._error_backoff = 0.0
        monkeypatch.setattr(worker.maintainer, "run_if_due", lambda: False)
        assert worker._tick() == 1
    else:  # written apart, then claimed apart (the transaction path's fallbacks)
        assert claimed == 1
    assert fresh(first[0]).status == Status.SUCCEEDED
    assert (fresh(following).status, fresh(following).attempt) == (Status.RUNNING, 1)
    assert worker.completer.pending == 0 and worker._inbox.qsize() == 1


@pytest.mark.parametrize("why", ["a retry", "a workflow's job"])
def test_other_passes_keep_their_transaction(monkeypatch, why):
    """A retry (it goes back in line and NOTIFYs) or a workflow's job (release.py decides its
    dependents): the pass's transaction, as before (on SQLite every pass)."""
    if why == "a workflow's job":
        chain(add.s(1, 1), add.s(2)).enqueue()
        worker = Worker(concurrency=1, poll_interval=3600)
        monkeypatch.setattr(worker.maintainer, "run_if_due", lambda: False)
        assert worker._tick() == 1
        _hand_over(worker, _success)
    else:
        worker, _ = _worker_with_outcomes(monkeypatch, _retry)
    add.enqueue(5, 5)  # for the claim
    monkeypatch.setattr(worker.driver, "record_and_claim", _never, raising=False)

    with CaptureQueriesContext(connection) as captured:
        claimed = worker._tick()

    assert claimed >= 1
    assert worker.completer.pending == 0
    statements = _statements(captured)
    assert len(statements) >= 3, statements  # the write, the stats' upsert, the claim


def _never(*args, **kwargs):
    raise AssertionError("this pass writes in its transaction")


# --- the same outcomes through both paths: the same rows ----------------------------------


def _running(owner: str, specs: list[tuple[float, float, bool]]) -> list[Job]:
    """Jobs leased to ``owner``, one per (run seconds so far, wait seconds before its start,
    cancellation requested)."""
    jobs = [add.enqueue(i, i) for i in range(len(specs))]
    claimed = driver_for("default").claim(["default"], len(jobs), owner)
    assert len(claimed) == len(jobs)
    for job, (run, wait, cancel) in zip(jobs, specs, strict=True):
        Job.objects.filter(pk=job.pk).update(
            started_at=Now() - timedelta(seconds=run),
            run_after=Now() - timedelta(seconds=run + wait),
            cancel_requested_at=Now() if cancel else None,
        )
    return [fresh(job) for job in jobs]


def _outcomes(jobs: list[Job]) -> list[Outcome]:
    kinds = [OutcomeKind.SUCCEEDED, OutcomeKind.DISCARD, OutcomeKind.CANCELLED]
    outcomes = []
    for n, job in enumerate(jobs):
        kind = kinds[n % len(kinds)]
        error = {"type": "E", "message": str(n), "traceback": None}
        outcome = Outcome(
            job_id=job.pk, attempt=job.attempt, kind=kind, max_attempts=job.max_attempts,
            result_json=str(n) if kind == OutcomeKind.SUCCEEDED else None,
            error=error if kind == OutcomeKind.DISCARD else None,
        )  # fmt: skip
        outcomes.append(outcome)
    outcomes.append(  # a stale attempt's: not written, not counted
        Outcome(job_id=jobs[0].pk, attempt=0, kind=OutcomeKind.SUCCEEDED, max_attempts=3)
    )
    return outcomes


def _counters() -> Counter:
    rows = StatsCounter.objects.values_list("queue", "task_name", "name", "bucket", "count")
    found: Counter = Counter()
    for queue, task, name, klass, n in rows:
        found[(queue, task, name, klass)] += n
    return found


def _rows(jobs: list[Job]) -> list[tuple]:
    return [
        (j.status, j.result, [(e["type"], e["message"]) for e in j.errors], j.attempts_charged,
         j.lease_owner, j.finished_at is not None)
        for j in map(fresh, jobs)
    ]  # fmt: skip


@pytest.mark.postgres_only
def test_the_one_statement_writes_and_counts_what_the_transaction_path_does():
    """The same outcomes (successes, failures, cancellations, some of jobs whose cancellation
    was requested, a stale one) on jobs alike: the same job rows and the same counters,
    durations classed alike: waits (fixed by the rows) from under a millisecond to weeks, runs
    (measured to the write's clock) from a minute on, each a class's middle so that the clock
    moving between the two writes stays within the class."""
    driver = driver_for("default")
    owner = "worker-a"
    specs = [
        (histogram.value(60 + 4 * n), histogram.value(8 * n) if n % 3 else 0.0, n % 5 == 0)
        for n in range(17)
    ]
    first = _running(owner, specs)
    with transaction.atomic():
        recorded = release.record(driver, owner, _outcomes(first), skip_locked=True)
    by_transaction = _counters()
    StatsCounter.objects.all().delete()

    second = _running(owner, specs)
    ready = [add.enqueue(9, 9), add.using(priority=5).enqueue(8, 8)]
    write = counters.counted_write(owner, _outcomes(second))
    at_once, claimed = driver.record_and_claim(owner, write, ["default"], 5)

    assert _counters() == by_transaction
    assert sum(by_transaction.values()) > len(specs)  # endings, and their durations
    assert _rows(second) == _rows(first)
    assert len(at_once.written) == len(recorded.written) == len(specs)
    assert sorted(e.status for e in at_once.ended) == sorted(e.status for e in recorded.ended)
    assert [job.id for job in claimed] == [ready[1].pk, ready[0].pk]  # as claim() orders
    assert {fresh(job).status for job in ready} == {Status.RUNNING}


_BUDGETED = (OutcomeKind.RETRY, OutcomeKind.LEASE_EXPIRED)
# Every kind of ending, with and without a requested cancellation, retries with their budget
# left and spent, snoozes to a time and to a wait: (kind, cancellation requested, spent).
_EVERY_ENDING = [
    (kind, cancel, spent)
    for kind in OutcomeKind
    for cancel in (False, True)
    for spent in ((False, True) if kind in _BUDGETED else (False,))
]  # fmt: skip


def _every_ending(jobs: list[Job]) -> list[Outcome]:
    outcomes = []
    for job, (kind, _, spent) in zip(jobs, _EVERY_ENDING, strict=True):
        failed = kind in (OutcomeKind.RETRY, OutcomeKind.DISCARD, OutcomeKind.LEASE_EXPIRED)
        outcomes.append(Outcome(
            job_id=job.pk, attempt=job.attempt, kind=kind, max_attempts=1 if spent else 5,
            crashes_charged=1000 if spent else 0,
            delay=30.0 if kind in (OutcomeKind.RETRY, OutcomeKind.SNOOZE) else 0.0,
            result_json="1" if kind == OutcomeKind.SUCCEEDED else None,
            error={"type": "E", "message": "m", "traceback": None} if failed else None,
        ))  # fmt: skip
    # A stale attempt of four of them, each of another kind: neither written nor counted.
    stale = (OutcomeKind.SUCCEEDED, OutcomeKind.DISCARD, OutcomeKind.CANCELLED, OutcomeKind.RETRY)
    for job, kind in zip(jobs, stale, strict=False):
        outcomes.append(Outcome(job_id=job.pk, attempt=job.attempt - 1, kind=kind, max_attempts=5))
    return outcomes


@pytest.mark.postgres_only
def test_every_kind_of_ending_counts_alike_on_both_paths():
    """Each kind of ending, with and without a requested cancellation, with a budget left and
    spent: the one statement counts each attempt as the transaction path does (its ending
    by the status its row took, or nothing where that status ends no attempt's work)."""
    driver = driver_for("default")
    owner = "worker-a"
    specs = [(histogram.value(60 + 4 * (n % 17)), histogram.value(8 * (n % 9)), cancel)
             for n, (_, cancel, _) in enumerate(_EVERY_ENDING)]  # fmt: skip
    first = _running(owner, specs)
    with transaction.atomic():
        release.record(driver, owner, _every_ending(first), skip_locked=True)
    by_transaction = _counters()
    Job.objects.filter(pk__in=[job.pk for job in first]).delete()  # released ones are ready
    StatsCounter.objects.all().delete()

    second = _running(owner, specs)
    write = counters.counted_write(owner, _every_ending(second))
    driver.record_and_claim(owner, write, ["default"], 0)

    assert _counters() == by_transaction
    assert {"succeeded", "failed", "cancelled", "retried", "run", "wait"} <= {
        name for _, _, name, _ in by_transaction
    }


def _generic_plan(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """The plan PostgreSQL keeps for ``sql`` once it plans it generically (as it does a
    worker's pass from its sixth call), run once: ``EXPLAIN (ANALYZE)`` of it prepared, with
    ``plan_cache_mode = force_generic_plan``, in one transaction."""
    names: list[str] = []

    def number(found: re.Match[str]) -> str:
        if found.group(1) not in names:
            names.append(found.group(1))
        return f"${names.index(found.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(f"PREPARE wq_pass_plan AS {text}")
        try:
            cursor.execute(
                f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE wq_pass_plan "
                f"({', '.join(['%s'] * len(names))})",
                [params[name] for name in names],
            )
            (plan,) = cursor.fetchone()
        finally:
            cursor.execute("DEALLOCATE wq_pass_plan")
    return (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", []) for node in _nodes(child))]


@pytest.mark.postgres_only  # the plan of PostgreSQL's one statement
@pytest.mark.postgres_direct  # PREPAREs a statement of its own
def test_a_pass_reaches_the_jobs_it_writes_by_their_primary_key():
    """The pass's kept (generic) plan reads the jobs whose outcomes it writes by their primary
    key only: never every running job through an index on status (in a fleet, every
    worker's, on every pass of each). The claim walks wq_job_claim. (A table of a few rows
    is read whole by any plan: these jobs sit among finished ones.)"""
    driver = driver_for("default")
    Job.objects.bulk_create(
        Job(task_name=add.name, status=Status.SUCCEEDED, finished_at=Now()) for _ in range(3000)
    )
    _running("worker-b", [(1.0, 0.0, False)] * 60)  # another worker's running jobs
    ours = _running("worker-a", [(1.0, 0.0, False)] * 3)
    add.enqueue_many([((i, 2), {}) for i in range(5)])
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")
    write = counters.counted_write("worker-a", _outcomes(ours))
    sql = driver._record_and_claim_sql(write.bounds, write.counters)
    plan = _generic_plan(sql, driver._record_and_claim_params("worker-a", write, ["default"], 5))

    reads = {
        (node["Node Type"], node.get("Index Name"))
        for node in _nodes(plan)
        if node.get("Relation Name") == Job._meta.db_table and node["Node Type"] != "ModifyTable"
    }
    by_key = {("Index Scan", "django_workqueue_job_pkey"),
              ("Index Only Scan", "django_workqueue_job_pkey")}  # fmt: skip
    assert reads - by_key == {("Index Scan", "wq_job_claim")}, reads
    assert {fresh(job).status for job in ours} == {Status.SUCCEEDED, Status.FAILED,
                                                   Status.CANCELLED}  # fmt: skip


@pytest.mark.postgres_only
@pytest.mark.parametrize("given", ["parameter", "literal"])
def test_the_duration_classes_in_sql_are_those_of_bucket(given: str):
    """``width_bucket`` over ``histogram.lower_bounds()`` where the duration is >= 0 (the one
    statement's classing) classes every duration as ``counters.duration_class`` does: by
    ``bucket``, at each class's edge to the last bit of a float, and none below 0. Whether
    the bounds are a bound parameter or the statement's literal (``_float8_array``, as
    ``record_and_claim`` has them)."""
    from django_workqueue.db.postgresql import _float8_array

    bounds = list(histogram.lower_bounds())
    values = [-1.0, -0.0005, 0.0, 0.0005]
    for edge in bounds:
        values += [edge, math.nextafter(edge, 0.0), math.nextafter(edge, math.inf)]
    values.append(10.0**9)
    with connection.cursor() as cursor:
        if given == "parameter":
            array, params = "%s::float8[]", [bounds, values]
        else:
            array, params = _float8_array(bounds), [values]
        cursor.execute(
            f"SELECT CASE WHEN d >= 0 THEN width_bucket(d, {array}) END "
            "FROM unnest(%s::float8[]) WITH ORDINALITY AS u(d, n) ORDER BY n",
            params,
        )
        in_sql = [row[0] for row in cursor.fetchall()]
    assert in_sql == [counters.duration_class(value) for value in values]
    assert in_sql[2:] == [histogram.bucket(value) for value in values[2:]]
