"""``runworker --pool processes``: each slot runs its jobs in a child process, and what a child
does to itself (hang, exit, crash, grow) or suffers (SIGKILL) costs one attempt, never the worker.

Real workers of ``tests.acceptance.settings_pools`` on the queue ``pool`` (the tasks of
``testproject.testapp.pool_tasks``); each attempt writes the pid that ran it to a ledger file, so
the tests see which child ran what, and that nothing ran twice. A test's workers are SIGKILLed when
it ends, and their children must then exit by themselves (a parent's death closes their pipe).

The thread pool (the default) cannot kill a job: it refuses ``--hard-timeout``, a task that
declares ``hard_timeout`` on a queue it serves, and the ``--max-*-per-child`` options, naming
``--pool processes``.

Both databases.
"""

from __future__ import annotations

import importlib
import os
import signal
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any
from unittest import mock

import pytest

from django_workqueue import chain, operations, registry
from django_workqueue.models import Job, WorkerProcess
from django_workqueue.states import Status
from testproject.testapp.tasks import add
from tests.chaos.harness import Entry, Ledger, check_invariants
from tests.support.database import fresh
from tests.support.processes import (
    RunworkerProcess,
    StartWorker,
    children_of,
    pid_running,
    processes_naming,
    run_manage,
    wait_for,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

SETTINGS = ("--settings", "tests.acceptance.settings_pools")


def import_without_registering(name: str) -> ModuleType:
    """Import a task module for its ``Task`` objects (to enqueue with), leaving this process's
    registry as it was: the pool tasks' queue is in the workers' settings only, and this
    process's system checks and in-process workers must not see tasks of a queue it lacks."""
    with mock.patch.dict(registry._registry):
        return importlib.import_module(name)


pool_tasks = import_without_registering("testproject.testapp.pool_tasks")
EXC = "django_workqueue.exceptions"


@pytest.fixture(autouse=True)
def pool_queue(settings: Any) -> None:
    """This process enqueues to the queue ``pool`` too."""
    settings.WORKQUEUE = {
        **settings.WORKQUEUE, "QUEUES": [*settings.WORKQUEUE["QUEUES"], pool_tasks.QUEUE],
    }  # fmt: skip


@pytest.fixture
def ledger(tmp_path: Any) -> Ledger:
    return Ledger(tmp_path / "ledger.jsonl")


@pytest.fixture
def start_pool(start_worker: StartWorker) -> Iterator[StartWorker]:
    """Start ``runworker --pool processes --queues pool`` workers.

    At the end of the test each worker still alive is SIGKILLed: its children must exit by
    themselves (and are SIGKILLed, failing the test, if they have not within 15 s); so are the
    children left behind by a worker the test killed."""
    started: list[RunworkerProcess] = []

    def start(*args: str, name: str = "pool", env: dict[str, str] | None = None) -> Any:
        worker = start_worker(
            *SETTINGS, "--pool", "processes", "--queues", pool_tasks.QUEUE, *args,
            name=name, env=env,
        )  # fmt: skip
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()
    # Every child of these workers (even of one the test killed) names its worker's id.
    children = [
        child for worker in started for child in processes_naming(worker.worker_id)
        if child.pid != worker.pid
    ]  # fmt: skip
    try:
        wait_until(
            lambda: not any(child.running for child in children), timeout=15,
            message=f"the children {children} of SIGKILLed workers to exit",
        )  # fmt: skip
    finally:
        for child in children:
            if child.running:
                os.kill(child.pid, signal.SIGKILL)


def starts(ledger: Ledger, job: Job) -> list[Entry]:
    """The ``start`` entries of ``job``'s attempts, in the order they were written."""
    entries = [e for e in ledger.entries() if e.job == job.pk and e.kind == "start"]
    return sorted(entries, key=lambda entry: entry.t)


def start_pids(ledger: Ledger, job: Job) -> list[tuple[int, int]]:
    return [(entry.attempt, entry.pid) for entry in starts(ledger, job)]


def running_pid(ledger: Ledger, job: Job, worker: RunworkerProcess, attempt: int = 1) -> int:
    """Wait for ``job``'s attempt to start; the pid of the child that runs it."""
    entry = wait_for(
        lambda: next((e for e in starts(ledger, job) if e.attempt == attempt), None),
        alive=[worker], message=f"attempt {attempt} of job {job.pk} to start",
    )  # fmt: skip
    return entry.pid


def all_finished(*jobs: Job) -> bool:
    return all(fresh(job).is_finished for job in jobs)


def error_types(job: Job) -> list[tuple[int, str]]:
    return [(error["attempt"], error["type"]) for error in job.errors]


def wait_gone(pids: list[int], message: str) -> None:
    wait_until(lambda: not any(pid_running(pid) for pid in pids), timeout=15, message=message)


# --- children ------------------------------------------------------------------------------------


def test_each_slot_runs_its_jobs_in_a_child_process_in_a_session_of_its_own(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    jobs = pool_tasks.pool_work.enqueue_many([((), {"ledger": str(ledger), "sleep": 0.05})] * 6)
    worker = start_pool("--concurrency", "2")
    wait_for(lambda: all_finished(*jobs), alive=[worker], message="the six jobs")

    assert [(job.status, job.attempt, job.errors) for job in jobs] == [
        (Status.SUCCEEDED, 1, [])
    ] * 6
    pids = {job.result for job in jobs}
    assert worker.pid not in pids
    assert 1 <= len(pids) <= 2  # two slots, two children, reused from job to job
    assert pids <= {child.pid for child in children_of(worker.pid)}
    # Ctrl-C in a terminal signals the foreground process group: the parent's, not theirs.
    assert all(os.getsid(pid) != os.getsid(worker.pid) for pid in pids)
    for job in jobs:
        assert start_pids(ledger, job) == [(1, job.result)]


def test_a_child_ignores_sigint_and_sigint_to_the_parent_drains(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    job = pool_tasks.pool_work.enqueue(ledger=str(ledger), sleep=2.0)
    worker = start_pool("--concurrency", "1", env={"WORKQUEUE_GRACE": "30"})
    child = running_pid(ledger, job, worker)

    os.kill(child, signal.SIGINT)  # as if it were in the terminal's foreground process group
    wait_for(lambda: all_finished(job), alive=[worker], message="the job to finish")

    assert (job.status, job.attempt, job.result, job.errors) == (Status.SUCCEEDED, 1, child, [])
    assert pid_running(child)
    worker.send(signal.SIGINT)
    assert worker.wait() == 0
    assert "SIGINT: draining" in worker.stderr
    wait_gone([child], "the child of the stopped worker to exit")


# --- hard timeout --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "how", "args"),
    [
        pytest.param(pool_tasks.hang, "sleep", [], id="task-hard_timeout-sleeping"),
        pytest.param(pool_tasks.hang_without_limit, "busy", ["--hard-timeout", "1"],
                     id="worker-hard-timeout-busy-in-C"),
    ],
)  # fmt: skip
def test_a_hard_timeout_kills_the_hung_child_and_the_next_job_runs_in_a_fresh_one(
    start_pool: StartWorker, ledger: Ledger, task: Any, how: str, args: list[str]
) -> None:
    """``busy`` ignores SIGTERM and hangs in C code that never returns to the interpreter: no
    Python signal handler of the child runs, only SIGKILL ends it. Each attempt is charged
    (``max_attempts=2``, no backoff) and the job ends failed; the slot runs the next job."""
    first = pool_tasks.pool_work.enqueue(ledger=str(ledger))
    worker = start_pool("--concurrency", "1", *args)
    wait_for(lambda: all_finished(first), alive=[worker], message="the first job")

    hung = task.using(priority=10).enqueue(ledger=str(ledger), how=how)
    after = pool_tasks.pool_work.enqueue(ledger=str(ledger))
    wait_for(lambda: all_finished(hung, after), alive=[worker], timeout=60, message="both jobs")

    assert (hung.status, hung.attempt, hung.max_attempts) == (Status.FAILED, 2, 2)
    assert error_types(hung) == [(1, f"{EXC}.JobTimeout"), (2, f"{EXC}.JobTimeout")]
    assert all("hard timeout" in error["message"] for error in hung.errors), hung.errors
    attempts = start_pids(ledger, hung)
    assert [attempt for attempt, _ in attempts] == [1, 2]
    killed_first, killed_second = (pid for _, pid in attempts)
    assert killed_first == first.result  # the slot's one child ran the first job, then hung
    assert killed_second != killed_first  # a fresh child for the retry
    assert (after.status, after.attempt, after.errors) == (Status.SUCCEEDED, 1, [])
    # The next job ran in a fresh child too: after the hung job (which has the higher
    # priority), or between its attempts (claimed while the first attempt's outcome waited
    # for its write).
    assert after.result not in (killed_first, worker.pid)
    assert start_pids(ledger, after) == [(1, after.result)]
    wait_gone([killed_first, killed_second], "the hung children to be gone")
    assert worker.alive


def test_a_jobs_timeout_does_not_count_the_start_of_a_fresh_child(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    """With one job per child each job waits for a fresh child to import the project (longer
    than the task's 0.6 s ``timeout`` on a loaded machine); the timeout runs from when the job
    is handed to the child."""
    jobs = pool_tasks.short_with_timeout.enqueue_many([((), {"ledger": str(ledger)})] * 3)
    worker = start_pool("--concurrency", "1", "--max-jobs-per-child", "1")
    wait_for(lambda: all_finished(*jobs), alive=[worker], timeout=60, message="the jobs")

    assert [(fresh(job).status, fresh(job).attempt, fresh(job).errors) for job in jobs] == [
        (Status.SUCCEEDED, 1, [])
    ] * 3
    assert len({fresh(job).result for job in jobs}) == 3


# --- children replaced ---------------------------------------------------------------------------


def ran_by_pid(ledger: Ledger, job_ids: list[int]) -> dict[int, list[int]]:
    """The jobs each child ran (its pid: their ids, in the order it started them)."""
    ran: dict[int, list[int]] = defaultdict(list)
    for entry in sorted(ledger.entries(), key=lambda entry: entry.t):
        if entry.kind == "start" and entry.job in job_ids:
            ran[entry.pid].append(entry.job)
    return ran


def assert_each_ran_once(job_ids: list[int], ledger: Ledger) -> None:
    """0 lost, 0 duplicated: every job succeeded on its first attempt, whose body started and
    ended once, in the child whose pid is the job's result."""
    report = check_invariants(job_ids, ledger, faulted=set())
    report.assert_ok()
    jobs = Job.objects.in_bulk(job_ids)
    assert {(job.status, job.attempt) for job in jobs.values()} == {(Status.SUCCEEDED, 1)}
    entries = Counter((e.job, e.attempt, e.kind, e.pid) for e in ledger.entries())
    expected = Counter(
        (job.pk, 1, kind, job.result) for job in jobs.values() for kind in ("start", "effect")
    )
    assert entries == expected


def test_max_jobs_per_child_replaces_children_under_a_stream_losing_and_repeating_nothing(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    jobs = pool_tasks.pool_work.enqueue_many([((), {"ledger": str(ledger), "sleep": 0.02})] * 16)
    job_ids = [job.pk for job in jobs]
    worker = start_pool("--concurrency", "2", "--max-jobs-per-child", "3")
    wait_for(lambda: all_finished(*jobs), alive=[worker], timeout=60, message="the stream")

    assert_each_ran_once(job_ids, ledger)
    ran = ran_by_pid(ledger, job_ids)
    assert worker.pid not in ran
    assert max(len(ids) for ids in ran.values()) == 3
    assert len(ran) >= 6  # 16 jobs, at most 3 per child
    # A child that ran its third job is replaced: it exits, and only the slots' current
    # children (at most two, none of which ran more than three jobs) remain.
    wait_until(
        lambda: sum(pid_running(pid) for pid in ran) <= 2, timeout=15,
        message="the replaced children to exit",
    )  # fmt: skip
    retired = [pid for pid in ran if not pid_running(pid)]
    assert all(len(ran[pid]) == 3 for pid in retired), dict(ran)
    assert worker.alive


def test_max_memory_per_child_replaces_a_child_after_the_job_that_grew_it(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    """The limit is 150 MB of RSS after a job; a child of the test project takes about 50 MB,
    and a ``megabytes=200`` job keeps 200 MB more in its child: that child, and only those,
    must be replaced, after that job, with nothing lost or repeated."""
    big = {2, 6, 9}
    calls = [
        ((), {"ledger": str(ledger), "sleep": 0.02, "megabytes": 200 if n in big else 0})
        for n in range(12)
    ]
    jobs = pool_tasks.pool_work.enqueue_many(calls)
    job_ids = [job.pk for job in jobs]
    big_ids = {jobs[n].pk for n in big}
    worker = start_pool("--concurrency", "2", "--max-memory-per-child", "150")
    wait_for(lambda: all_finished(*jobs), alive=[worker], timeout=60, message="the stream")

    assert_each_ran_once(job_ids, ledger)
    ran = ran_by_pid(ledger, job_ids)
    # A big job is the last job of the child that ran it, and that child exits ...
    for pid, ids in ran.items():
        assert not big_ids & set(ids[:-1]), f"child {pid} ran more jobs after a big one: {ids}"
    grown = [pid for pid, ids in ran.items() if ids[-1] in big_ids]
    assert len(grown) == len(big)
    wait_gone(grown, "the children that grew past the limit to exit")
    # ... while a child that ran only small jobs is kept: its next job would run in it.
    assert all(pid_running(pid) for pid in ran if pid not in grown)
    assert worker.alive


def test_a_replaced_child_that_does_not_exit_by_itself_is_killed(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    """A job that leaves a thread running holds its child's interpreter at exit: the replaced
    child must not live on beside its replacement, holding its memory."""
    left = pool_tasks.leave_a_thread.enqueue(ledger=str(ledger))
    worker = start_pool("--concurrency", "1", "--max-jobs-per-child", "1")
    wait_for(lambda: all_finished(left), alive=[worker], message="the first job")
    after = pool_tasks.pool_work.enqueue(ledger=str(ledger))
    wait_for(lambda: all_finished(after), alive=[worker], message="the next job")

    assert (left.status, after.status) == (Status.SUCCEEDED, Status.SUCCEEDED)
    assert after.result != left.result  # a fresh child (this one is replaced in turn)
    wait_gone([left.result], f"the replaced child {left.result} to be gone")
    assert worker.alive


# --- children that die ---------------------------------------------------------------------------


def test_a_child_sigkilled_from_outside_fails_that_attempt_and_a_fresh_child_runs_the_retry(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    job = pool_tasks.stall_first_attempt.enqueue(ledger=str(ledger))
    worker = start_pool("--concurrency", "1")
    child = running_pid(ledger, job, worker)
    assert child in {c.pid for c in children_of(worker.pid)}

    os.kill(child, signal.SIGKILL)
    wait_for(lambda: all_finished(job), alive=[worker], message="the retry")

    assert (job.status, job.attempt) == (Status.SUCCEEDED, 2)
    assert error_types(job) == [(1, f"{EXC}.ProcessDied")]
    assert "killed by signal SIGKILL" in job.errors[0]["message"], job.errors
    assert start_pids(ledger, job) == [(1, child), (2, job.result)]
    assert job.result not in (child, worker.pid)
    assert worker.alive


@pytest.mark.parametrize(
    ("how", "message"),
    [("exit", "exited with code 3"), ("segv", "killed by signal SIGSEGV")],
)
def test_a_child_that_dies_every_time_ends_its_job_failed_after_max_attempts(
    start_pool: StartWorker, ledger: Ledger, how: str, message: str
) -> None:
    """A poison pill costs one child per attempt, never the worker; the job ends ``failed``
    after its three attempts (never loops), and the slot then runs the next job."""
    pill = pool_tasks.die.using(priority=10).enqueue(ledger=str(ledger), how=how)
    after = pool_tasks.pool_work.enqueue(ledger=str(ledger))
    worker = start_pool("--concurrency", "1")
    wait_for(lambda: all_finished(pill, after), alive=[worker], timeout=60, message="both jobs")

    assert (pill.status, pill.attempt, pill.max_attempts) == (Status.FAILED, 3, 3)
    assert pill.finished_at is not None and pill.lease_owner is None
    assert error_types(pill) == [(n, f"{EXC}.ProcessDied") for n in (1, 2, 3)]
    assert all(message in error["message"] for error in pill.errors), pill.errors
    attempts = start_pids(ledger, pill)
    assert [attempt for attempt, _ in attempts] == [1, 2, 3]
    pids = {pid for _, pid in attempts}
    assert len(pids) == 3 and worker.pid not in pids  # a fresh child for each attempt
    # The next job ran in a child too (it may have been claimed between two attempts, while
    # the pill's outcome waited for the next write: priority orders claims, not that race).
    assert (after.status, after.attempt, after.errors) == (Status.SUCCEEDED, 1, [])
    assert after.result != worker.pid
    assert worker.alive


def test_an_idle_child_that_died_costs_the_next_job_nothing(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    """A child killed while it waits for work (the kernel's OOM killer, a kill from outside) is
    replaced before the next job is handed to it: that job's body never began in the dead child,
    so it spends no attempt — a job of one attempt runs and succeeds, never dead-lettered
    with ``ProcessDied`` without having run."""
    worker = start_pool("--concurrency", "1")
    first = pool_tasks.pool_work.enqueue(ledger=str(ledger))
    wait_for(lambda: all_finished(first), alive=[worker], timeout=60, message="the first job")
    ((_, idle),) = start_pids(ledger, first)
    os.kill(idle, signal.SIGKILL)
    wait_gone([idle], message=f"the idle child {idle} to die")

    job = pool_tasks.pool_work.using(max_attempts=1).enqueue(ledger=str(ledger))
    wait_for(lambda: all_finished(job), alive=[worker], timeout=60, message="the next job")

    job = fresh(job)
    assert (job.status, job.errors) == (Status.SUCCEEDED, [])
    assert (job.attempt, job.attempts_charged, job.crashes_charged) == (1, 1, 0)
    ((_, pid),) = start_pids(ledger, job)
    assert pid not in (idle, worker.pid)  # a fresh child ran it
    assert worker.alive


def test_sigkill_of_the_parent_ends_its_children_and_another_worker_recovers_the_job(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    job = pool_tasks.stall_first_attempt.enqueue(ledger=str(ledger))
    a = start_pool("--concurrency", "2", name="a")
    child = running_pid(ledger, job, a)
    children = children_of(a.pid)
    assert child in {c.pid for c in children}

    a.send(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    wait_until(
        lambda: not any(c.running for c in children), timeout=15,
        message=f"the children {children} of the killed worker to exit",
    )  # fmt: skip
    b = start_pool("--concurrency", "1", name="b")
    wait_for(lambda: all_finished(job), alive=[b], timeout=30, message="the recovery")

    assert (job.status, job.attempt) == (Status.SUCCEEDED, 2)
    assert error_types(job) == [(1, "LeaseExpired")]
    assert a.worker_id in job.errors[0]["message"]
    assert [(e.attempt, e.owner) for e in starts(ledger, job)] == [
        (1, a.worker_id), (2, b.worker_id),
    ]  # fmt: skip
    assert start_pids(ledger, job) == [(1, child), (2, job.result)]


def test_a_child_stuck_in_c_code_exits_when_its_parent_is_sigkilled(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    """The job the process pool is for: stuck in C code that holds the interpreter lock, where
    no thread of the child can read its pipe. It must not outlive the worker (holding its
    database connection and burning a core for days)."""
    job = pool_tasks.hang_without_limit.enqueue(ledger=str(ledger), how="busy")
    worker = start_pool("--concurrency", "1")
    child = running_pid(ledger, job, worker)

    worker.send(signal.SIGKILL)
    assert worker.wait() == -signal.SIGKILL

    wait_gone([child], f"the busy child {child} of the killed worker to exit")


# --- what a job does in a child ------------------------------------------------------------------


def test_progress_reports_and_cancel_job_reach_a_job_running_in_a_child(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    job = pool_tasks.report_until_cancelled.enqueue(ledger=str(ledger))
    worker = start_pool("--concurrency", "1")
    child = running_pid(ledger, job, worker)
    wait_for(
        lambda: fresh(job).progress_message == f"running in pid {child}", alive=[worker],
        message="the child's progress report",
    )  # fmt: skip
    assert (job.progress_current, job.progress_total) == (1, None)

    assert operations.cancel_job(job).action == "cancel_requested"
    wait_for(lambda: all_finished(job), alive=[worker], message="the cancellation")

    assert (job.status, job.attempt) == (Status.CANCELLED, 1)
    assert start_pids(ledger, job) == [(1, child)]
    # A cooperative end: the child is not killed, and runs the slot's next job.
    after = pool_tasks.pool_work.enqueue(ledger=str(ledger))
    wait_for(lambda: all_finished(after), alive=[worker], message="the next job")
    assert (after.status, after.result) == (Status.SUCCEEDED, child)


def test_cooperative_timeouts_async_tasks_and_workflows_run_in_children(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    overrun = pool_tasks.overrun_cooperatively.enqueue(ledger=str(ledger))
    coroutine = pool_tasks.async_pid.enqueue(7)
    pid_of = pool_tasks.pid_of
    workflow = chain(pid_of.s("first"), pid_of.s()).enqueue(name="in children")
    steps = list(Job.objects.filter(workflow_id=workflow.pk).order_by("id"))
    worker = start_pool("--concurrency", "2")
    wait_for(
        lambda: all_finished(overrun, coroutine, *steps), alive=[worker], timeout=30,
        message="the jobs",
    )  # fmt: skip

    assert (overrun.status, overrun.attempt) == (Status.FAILED, 2)
    assert error_types(overrun) == [(1, f"{EXC}.JobTimeout"), (2, f"{EXC}.JobTimeout")]
    assert all("hard timeout" not in error["message"] for error in overrun.errors)
    assert coroutine.status == Status.SUCCEEDED
    assert coroutine.result[0] == 7 and coroutine.result[1] != worker.pid
    assert [step.status for step in steps] == [Status.SUCCEEDED] * 2
    first, second = steps
    assert first.result[0] == "first"
    assert second.result[0] == first.result  # the chain passed the first step's result on
    pids = {
        first.result[1], second.result[1], coroutine.result[1],
        *(pid for _, pid in start_pids(ledger, overrun)),
    }  # fmt: skip
    assert worker.pid not in pids
    workflow.refresh_from_db()
    assert workflow.status == "succeeded"


# --- shutdown ------------------------------------------------------------------------------------


def test_sigterm_lets_the_busy_children_finish_their_jobs_and_claims_nothing_new(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    running = pool_tasks.pool_work.enqueue_many([((), {"ledger": str(ledger), "sleep": 3.0})] * 2)
    worker = start_pool("--concurrency", "2", env={"WORKQUEUE_GRACE": "30"})
    children = [running_pid(ledger, job, worker) for job in running]
    waiting = pool_tasks.pool_work.using(priority=-10).enqueue(ledger=str(ledger))

    worker.send(signal.SIGTERM)

    assert worker.wait() == 0
    assert "SIGTERM: draining" in worker.stderr
    assert "stopped after 2 attempts: 2 jobs finished (2 succeeded)" in worker.stdout
    for job, child in zip(running, children, strict=True):
        job.refresh_from_db()
        assert (job.status, job.attempt, job.result, job.errors) == (
            Status.SUCCEEDED, 1, child, [],
        )  # fmt: skip
    waiting.refresh_from_db()
    assert (waiting.status, waiting.attempt, waiting.lease_owner) == (Status.READY, 0, None)
    assert not starts(ledger, waiting)
    wait_gone(children, "the stopped worker's children to exit")


def test_past_the_grace_period_the_children_are_killed_and_their_jobs_released_uncharged(
    start_pool: StartWorker, ledger: Ledger
) -> None:
    jobs = pool_tasks.stall_first_attempt.enqueue_many([((), {"ledger": str(ledger)})] * 2)
    worker = start_pool("--concurrency", "2", env={"WORKQUEUE_GRACE": "0.2"})
    children = [running_pid(ledger, job, worker) for job in jobs]

    worker.send(signal.SIGTERM)

    # Well before a 600-second attempt could end: the worker does not wait for it.
    assert worker.wait(timeout=15) == 0
    for job in jobs:
        assert f"job {job.pk} released back to ready at shutdown" in worker.stderr
        job.refresh_from_db()
        assert (job.status, job.attempt, job.max_attempts) == (Status.READY, 1, 3)
        assert (job.attempts_charged, job.crashes_charged) == (0, 0)
        assert (job.lease_owner, job.lease_expires_at, job.finished_at) == (None, None, None)
        assert job.errors == []  # a release is not a failure
    wait_gone(children, "the children past the grace period to be killed")


# --- the thread pool refuses what only a child process can enforce ------------------------------


def _refused(completed: Any, *names: str) -> None:
    assert completed.returncode == 1, completed
    assert "CommandError: " in completed.stderr, completed.stderr
    for name in ("--pool processes", *names):
        assert name in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr
    assert "started: queues=" not in completed.stdout + completed.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--hard-timeout", "5"], "--hard-timeout"),
        (["--pool", "threads", "--hard-timeout", "5"], "--hard-timeout"),
        (["--max-jobs-per-child", "100"], "--max-jobs-per-child"),
        (["--max-memory-per-child", "500"], "--max-memory-per-child"),
    ],
)
def test_the_thread_pool_refuses_the_options_of_child_processes_naming_the_fix(
    worker_env: Callable[..., dict[str, str]], args: list[str], option: str
) -> None:
    job = add.enqueue(1, 2)

    completed = run_manage(["runworker", "--burst", *SETTINGS, "--queues", "default", *args],
                           worker_env())  # fmt: skip

    _refused(completed, option)
    assert (fresh(job).status, job.attempt) == (Status.READY, 0)
    assert not WorkerProcess.objects.exists()


@pytest.mark.parametrize("queues", [[], ["--queues", "default,pool"]], ids=["all", "named"])
def test_a_thread_pool_serving_a_task_with_a_hard_timeout_refuses_naming_the_task(
    worker_env: Callable[..., dict[str, str]], ledger: Ledger, queues: list[str]
) -> None:
    job = pool_tasks.pool_work.enqueue(ledger=str(ledger))

    completed = run_manage(["runworker", "--burst", *SETTINGS, *queues], worker_env())

    _refused(completed, pool_tasks.hang.name, "hard_timeout")
    assert pool_tasks.hang_without_limit.name not in completed.stderr  # it declares none
    assert (fresh(job).status, job.attempt) == (Status.READY, 0)
    assert not WorkerProcess.objects.exists()


def test_a_thread_pool_serving_only_queues_without_hard_timeouts_runs(
    worker_env: Callable[..., dict[str, str]],
) -> None:
    """The counterpart: the same project, a queue whose tasks declare no ``hard_timeout``."""
    job = add.enqueue(1, 2)

    completed = run_manage(["runworker", "--burst", *SETTINGS, "--queues", "default"],
                           worker_env())  # fmt: skip

    assert completed.returncode == 0, completed
    assert (fresh(job).status, job.result) == (Status.SUCCEEDED, 3)


def test_a_process_pool_serving_a_task_with_a_hard_timeout_runs(
    worker_env: Callable[..., dict[str, str]], ledger: Ledger
) -> None:
    job = pool_tasks.pool_work.enqueue(ledger=str(ledger))

    completed = run_manage(
        ["runworker", "--burst", *SETTINGS, "--pool", "processes", "--hard-timeout", "30",
         "--max-jobs-per-child", "10", "--max-memory-per-child", "500"],
        worker_env(),
    )  # fmt: skip

    assert completed.returncode == 0, completed
    job.refresh_from_db()
    assert (job.status, job.attempt, job.errors) == (Status.SUCCEEDED, 1, [])
    assert start_pids(ledger, job) == [(1, job.result)]
    wait_gone([job.result], "the child of the burst worker to exit")


def test_children_that_cannot_import_the_project_stop_the_worker_before_it_claims(
    worker_env: Callable[..., dict[str, str]], ledger: Ledger
) -> None:
    job = pool_tasks.pool_work.enqueue(ledger=str(ledger))

    completed = run_manage(
        ["runworker", "--settings", "tests.acceptance.settings_children_fail", "--pool",
         "processes", "--queues", "pool", "--concurrency", "2"],
        worker_env(),
    )  # fmt: skip

    assert completed.returncode == 1, completed
    assert "CommandError: --pool processes: the worker's child process" in completed.stderr
    assert "before it was ready" in completed.stderr, completed.stderr
    assert "refuse to load in a child of the process pool" in completed.stderr  # its traceback
    assert (fresh(job).status, fresh(job).attempt) == (Status.READY, 0)
    assert not WorkerProcess.objects.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pool", "forks"], "argument --pool: invalid choice: 'forks'"),
        (["--pool", "processes", "--hard-timeout", "0"], "argument --hard-timeout: 0"),
        (["--pool", "processes", "--max-jobs-per-child", "0"], "argument --max-jobs-per-child: 0"),
        (["--pool", "processes", "--max-memory-per-child", "x"],
         "argument --max-memory-per-child: 'x'"),
    ],
)  # fmt: skip
def test_invalid_pool_arguments_exit_2_naming_the_argument(
    worker_env: Callable[..., dict[str, str]], args: list[str], message: str
) -> None:
    completed = run_manage(["runworker", "--burst", *SETTINGS, "--queues", "pool", *args],
                           worker_env())  # fmt: skip

    assert completed.returncode == 2, completed
    assert message in completed.stderr, completed.stderr
    assert "started: queues=" not in completed.stdout + completed.stderr
