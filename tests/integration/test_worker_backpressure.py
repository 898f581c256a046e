"""Backpressure in a running worker (SQLite and PostgreSQL): ``WORKQUEUE["BACKPRESSURE"]`` pauses
claims while running jobs, completions and the heartbeat go on; the hook sees live stats; a
failing hook is logged and slows the worker down without stopping it. Also the setting's check.

Workers run on threads and read committed rows: ``transaction=True``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from django_workqueue import task
from django_workqueue.checks import check_settings
from django_workqueue.flow import WorkerStats
from django_workqueue.models import Job, WorkerProcess
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from testproject.testapp.tasks import add, always_fails
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HOOK = f"{__name__}.backpressure"


class HookState:
    def __init__(self) -> None:
        self.pause: float = 0.0
        self.fail = False
        self.seen: list[WorkerStats] = []
        self.answers: list[float] = []


state = HookState()


def backpressure(stats: WorkerStats) -> float:
    """The hook under test: pauses for ``state.pause`` (or raises), and keeps what it saw."""
    state.seen.append(stats)
    if state.fail:
        raise RuntimeError("the metrics service is down")
    state.answers.append(state.pause)
    return state.pause


released = threading.Event()


@task(max_attempts=1, lease_seconds=30)
def held() -> str:
    assert released.wait(20), "the test never released the job"
    return "done"


@pytest.fixture(autouse=True)
def fresh_state():
    global state
    state = HookState()
    released.clear()
    with workqueue_settings(BACKPRESSURE=HOOK, HEARTBEAT_INTERVAL=0.2):
        yield
    released.set()


class CountedPasses(Worker):
    fills = 0

    def _fill(self) -> int:
        claimed = super()._fill()
        self.fills += 1
        return claimed


@pytest.fixture
def counted_worker():
    started: list[tuple[Worker, threading.Thread]] = []

    def start(**options: Any) -> CountedPasses:
        worker = CountedPasses(poll_interval=0.05, **options)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        assert worker.started.wait(10), "worker did not start"
        started.append((worker, thread))
        return worker

    yield start
    released.set()
    for worker, thread in started:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "worker did not stop"


def status(job: Job) -> str:
    job.refresh_from_db()
    return job.status


def test_a_pause_holds_claims_while_running_jobs_finish_and_the_heartbeat_goes_on(
    counted_worker,
):
    running = held.enqueue()
    worker = counted_worker(concurrency=2)
    wait_until(lambda: status(running) == Status.RUNNING)

    state.pause = 3600.0
    wait_until(lambda: 3600.0 in state.answers, message="the hook asked for a pause")
    waiting = add.enqueue(1, 2)
    seen_at = WorkerProcess.objects.get(pk=worker.id).last_seen_at
    released.set()

    wait_until(lambda: status(running) == Status.SUCCEEDED, message="the running job finished")
    passes = worker.fills
    wait_until(lambda: worker.fills >= passes + 3, message="three more passes")
    wait_until(lambda: WorkerProcess.objects.get(pk=worker.id).last_seen_at > seen_at,
               message="a heartbeat during the pause")  # fmt: skip
    waiting.refresh_from_db()
    assert (waiting.status, waiting.attempt) == (Status.READY, 0)
    assert worker.claimed_count == 1


def test_the_hook_is_asked_before_claims_with_live_stats(counted_worker):
    state.pause = 0.01
    add.enqueue(1, 2)
    failing = always_fails.enqueue()  # three failed attempts (no backoff)

    worker = counted_worker(concurrency=2)

    wait_until(lambda: status(failing) == Status.FAILED)
    wait_until(lambda: any(s.failed == 3 and s.succeeded == 1 for s in state.seen),
               message="stats with the failures")  # fmt: skip
    last = state.seen[-1]
    assert (last.worker_id, last.slots, last.window_seconds) == (worker.id, 2, 30.0)
    assert last.claimed == 4 and last.fail_rate == 0.75
    assert last.uptime_seconds > 0
    claimed = [s.claimed for s in state.seen]
    assert claimed == sorted(claimed)


def test_a_failing_hook_is_logged_and_pauses_briefly_instead_of_stopping_the_worker(
    counted_worker, caplog
):
    state.fail = True
    jobs = [add.enqueue(n, n) for n in range(2)]

    with caplog.at_level(logging.ERROR, logger="django_workqueue.worker"):
        worker = counted_worker(concurrency=1)
        wait_until(lambda: all(status(job) == Status.SUCCEEDED for job in jobs), timeout=20)

    assert "the backpressure hook WORKQUEUE['BACKPRESSURE'] failed" in caplog.text
    assert "the metrics service is down" in caplog.text
    assert len(state.seen) >= 2  # asked before each claim, each time a failure
    assert not worker.stopping.is_set()


# --- the setting's check -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("tests.nowhere.hook", "'tests.nowhere.hook' cannot be imported"),
        (f"{__name__}.HOOK", f"'{__name__}.HOOK' is not callable"),
        (3, "is 3, not a dotted path"),
    ],
)
def test_a_backpressure_setting_that_names_no_callable_is_reported(value, problem):
    with workqueue_settings(BACKPRESSURE=value):
        messages = [m for m in check_settings() if "BACKPRESSURE" in m.msg]

    assert [m.id for m in messages] == ["django_workqueue.E011"]
    assert problem in messages[0].msg
    assert "dotted path of a function that takes a django_workqueue.flow.WorkerStats" in (
        messages[0].hint
    )


def test_a_backpressure_setting_that_names_a_callable_passes_the_check():
    assert check_settings() == []  # the autouse fixture sets it to this module's hook
