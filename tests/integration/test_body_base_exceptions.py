"""A task's body that raises a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
``KeyboardInterrupt``, ``GeneratorExit``) fails its attempt like any exception, on every path
that runs an attempt in this process: a slot thread, the worker's event loop, a batch (sync and
async), skip-queue and ``drain``. The attempt is recorded with the exception's class in
``errors``, retried under the task's policy, and whatever ran it goes on: the worker ends its
burst. The process pool and real ``runworker`` processes are in
tests/acceptance/test_body_exits.py.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connections

from django_workqueue.models import Job
from django_workqueue.states import Status
from django_workqueue.testing import drain
from django_workqueue.worker.runner import Worker
from testproject.testapp.tasks import add, batch_exits, batch_exits_async, exits, exits_async
from tests.support.database import fresh
from tests.support.tasks import interrupted_by_ctrl_c
from tests.support.waiting import join_slots

pytestmark = pytest.mark.django_db(transaction=True)

KINDS = ["SystemExit", "KeyboardInterrupt", "GeneratorExit"]
BOUND = 30.0  # seconds: far past any attempt here; a path that hangs fails instead of blocking


def bounded(call: Callable[[], Any]) -> Any:
    """Run ``call`` on a thread of its own and return its value; fail if it does not end (a
    path that takes the body's exception for its own death hangs or dies with it)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # reported to the test below, whatever it is
            outcome["raised"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="test-bounded", daemon=True)
    thread.start()
    thread.join(BOUND)
    assert not thread.is_alive(), f"{call} did not end within {BOUND}s"
    assert "raised" not in outcome, f"{call} raised {outcome.get('raised')!r}"
    return outcome.get("value")


def run_burst_worker() -> None:
    worker = Worker(queues=["default"], concurrency=2, burst=True, poll_interval=0.05)
    try:
        assert bounded(worker.run) == 0
    finally:
        join_slots(worker)


def error_types(job: Job) -> list[str]:
    return [error["type"] for error in fresh(job).errors]


def assert_failed_by(job: Job, kind: str, attempts: int = 1) -> None:
    job = fresh(job)
    assert (job.status, job.attempt) == (Status.FAILED, attempts), job.errors
    assert error_types(job) == [f"builtins.{kind}"] * attempts
    assert all("raised by the task's body" in error["message"] for error in job.errors)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("task", [exits, exits_async], ids=["sync", "async"])
def test_a_slot_records_the_body_exit_as_a_failure_and_the_burst_worker_goes_on(
    task: Any, kind: str
) -> None:
    job = task.enqueue(kind)
    after = add.enqueue(1, 2)  # the worker goes on to the next job, the loop too

    run_burst_worker()

    assert_failed_by(job, kind)
    assert (fresh(after).status, fresh(after).result) == (Status.SUCCEEDED, 3)


@pytest.mark.parametrize("task", [exits, exits_async], ids=["sync", "async"])
def test_a_body_exit_is_retried_under_the_task_policy(task: Any) -> None:
    job = task.using(max_attempts=2).enqueue("SystemExit")

    run_burst_worker()

    assert_failed_by(job, "SystemExit", attempts=2)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("task", [batch_exits, batch_exits_async], ids=["sync", "async"])
def test_a_batch_records_the_body_exit_as_each_member_failure(task: Any, kind: str) -> None:
    jobs = [task.enqueue(kind) for _ in range(3)]
    after = exits_async.enqueue("SystemExit")  # the event loop survives the batch's exit

    run_burst_worker()

    for job in jobs:
        assert_failed_by(job, kind)
    assert_failed_by(after, "SystemExit")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("task", [exits, exits_async], ids=["sync", "async"])
def test_skip_queue_records_the_body_exit_as_a_failure(task: Any, kind: str) -> None:
    job = bounded(lambda: task.using(skip_queue=True).enqueue(kind))

    assert_failed_by(job, kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("task", [exits, exits_async], ids=["sync", "async"])
def test_drain_records_the_body_exit_as_a_failure_and_runs_on(task: Any, kind: str) -> None:
    job = task.using(max_attempts=2).enqueue(kind)
    after = add.enqueue(1, 2)

    assert bounded(drain) == 3

    assert_failed_by(job, kind, attempts=2)
    assert fresh(after).status == Status.SUCCEEDED


@pytest.mark.parametrize("kind", KINDS)
def test_drain_on_the_main_thread_records_the_body_exit_as_a_failure(kind: str) -> None:
    assert threading.current_thread() is threading.main_thread()
    job = exits.enqueue(kind)

    assert drain() == 1

    assert_failed_by(job, kind)


@pytest.fixture
def python_default_sigint() -> Iterator[None]:
    """Python's own SIGINT handler, as in a process that installed none (a test run's earlier
    tests may leave another one: the watch then rightly stays out of the way)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("python_default_sigint")
def test_a_ctrl_c_of_the_process_during_drain_stops_it_and_gives_the_job_back() -> None:
    """Not the body's: the interrupt reaches the caller and the job is back ``ready``, its
    attempt not charged, as a worker's shutdown gives back its jobs."""
    job = interrupted_by_ctrl_c.enqueue()
    after = add.enqueue(1, 2)

    with pytest.raises(KeyboardInterrupt):
        drain()

    job = fresh(job)
    assert (job.status, job.attempt, job.max_attempts, job.errors) == (Status.READY, 1, 3, [])
    assert job.attempts_charged == 0
    assert fresh(after).status == Status.READY  # drain stopped
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
