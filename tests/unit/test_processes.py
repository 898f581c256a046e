"""A process slot (``worker/processes.py``) hands its job to a real child; a child that dies
before it began the job costs the job nothing, however late the slot learns of the death.

The slot cannot ask first: a killed child whose other threads are still exiting shows as a
zombie in /proc, yet ``waitpid`` does not report it and its socket still takes the job. These
tests make that moment last: the child is stopped (SIGSTOP), handed the job, then SIGKILLed, so
it dies with the job unread although the slot saw it alive and the send succeeded.

The child runs ``testproject.testapp.tasks.add``, which touches no database.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from django_workqueue.attempt.lease import RunningJob
from django_workqueue.budgets import Charge
from django_workqueue.context import JobContext
from django_workqueue.db import ClaimedJob
from django_workqueue.outcomes import OutcomeKind
from django_workqueue.states import Status
from django_workqueue.worker import processes
from django_workqueue.worker.runner import Worker
from testproject.testapp.tasks import add
from tests.support.processes import pid_running
from tests.support.waiting import wait_until

_send = processes.Child.send


def send_then_die(child: processes.Child, message: list[Any], channel: Any = None) -> bool:
    """``Child.send``, but a child handed a job dies with it unread: stopped before the send,
    SIGKILLed after it."""
    if message[0] != "run":
        return _send(child, message, channel)
    os.kill(child.pid, signal.SIGSTOP)
    wait_until(lambda: _state(child.pid) == "T", timeout=10, message=f"{child.pid} to stop")
    sent = _send(child, message, channel)
    os.kill(child.pid, signal.SIGKILL)
    return sent


def stop_then_send(child: processes.Child, message: list[Any], channel: Any = None) -> bool:
    """``Child.send``, but a child handed a job is stopped first: it never reads the job."""
    if message[0] == "run":
        os.kill(child.pid, signal.SIGSTOP)
    return _send(child, message, channel)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def worker() -> Worker:
    return Worker(pool="processes", concurrency=1)


@pytest.fixture
def slot(worker: Worker) -> Iterator[processes.ProcessSlot]:
    slot = worker.processes.slot(worker.slot_host())  # type: ignore[union-attr]
    slot.child.wait_ready()
    yield slot
    slot.close()


def claimed(worker: Worker) -> tuple[ClaimedJob, RunningJob]:
    """A claim of ``add(2, 3)`` with one attempt: a charged death would dead-letter it."""
    job = ClaimedJob(1, add.name, "default", 0, 1, 1, 0, 60, None, False, "[[2, 3], {}]")
    return job, RunningJob(JobContext(job, owner=worker.id, driver=worker.driver))


pytestmark = pytest.mark.skipif(not processes.POSIX, reason="the process pool runs on POSIX")


def test_a_child_that_dies_with_the_job_unread_costs_it_nothing_and_a_fresh_child_runs_it(
    worker: Worker, slot: processes.ProcessSlot, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    dead = slot.child
    monkeypatch.setattr(dead, "send", lambda message, channel=None: send_then_die(
        dead, message, channel
    ))  # fmt: skip
    job, item = claimed(worker)

    outcome, pending = slot.run(job, item)

    assert outcome is not None and pending
    assert (outcome.kind, outcome.result_json, outcome.error) == (OutcomeKind.SUCCEEDED, "5", None)
    assert not pid_running(dead.pid)
    assert slot.child is not dead and slot.child.jobs_run == 1  # a fresh child ran it
    assert f"child process {dead.pid} was killed by signal SIGKILL before it began job" in (
        caplog.text
    )


def run_to_release(worker: Worker, slot: processes.ProcessSlot, caplog: Any) -> None:
    """Run a claim in ``slot``: it must come back released, ready in its place, uncharged."""
    job, item = claimed(worker)

    with caplog.at_level(logging.WARNING, logger="django_workqueue.worker"):
        outcome, pending = slot.run(job, item)

    assert outcome is not None and pending
    assert (outcome.kind, outcome.charge, outcome.status) == (
        OutcomeKind.RELEASE, Charge.NOTHING, Status.READY,
    )  # fmt: skip


def test_children_that_keep_dying_before_they_begin_a_job_give_it_back_uncharged(
    worker: Worker, slot: processes.ProcessSlot, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """Bounded: ``HANDOVER_TRIES`` children, then the job is released as the shutdown releases
    (ready in its place, no budget spent), and the slot has a live child for the next job."""
    monkeypatch.setattr(processes.Child, "send", send_then_die)
    run_to_release(worker, slot, caplog)
    killed = [r for r in caplog.records if "before it began job 1" in r.getMessage()]
    assert len(killed) == processes.HANDOVER_TRIES
    assert f"{processes.HANDOVER_TRIES} child processes in a row ended" in caplog.text
    monkeypatch.undo()
    outcome, _ = slot.run(*claimed(worker))  # the slot's child is alive and runs the next job
    assert outcome is not None and outcome.kind == OutcomeKind.SUCCEEDED


def test_a_child_that_does_not_begin_a_job_within_its_hard_timeout_is_replaced_uncharged(
    worker: Worker, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """A child that cannot begin the job (stuck before the body, the interpreter lock held by a
    thread of an earlier job) is killed at the job's hard timeout like one running it, but the
    body never began there: a fresh child runs the job."""
    pool = processes.ProcessPool(processes.ChildLimits(hard_timeout=1.0))
    slot = processes.ProcessSlot(worker.slot_host(), pool)
    stuck = slot.child
    monkeypatch.setattr(stuck, "send", lambda message, channel=None: stop_then_send(
        stuck, message, channel
    ))  # fmt: skip
    job, item = claimed(worker)
    try:
        outcome, pending = slot.run(job, item)
    finally:
        slot.close()

    assert outcome is not None and pending
    assert (outcome.kind, outcome.result_json, outcome.error) == (OutcomeKind.SUCCEEDED, "5", None)
    assert f"child process {stuck.pid} was killed by signal SIGKILL before it began job" in (
        caplog.text
    )  # SIGTERM waits for a stopped process to continue: SIGKILL after the grace ended it


def failing_start(child: processes.Child, timeout: float = 0) -> None:
    """``Child.wait_ready`` of a child that cannot import the project."""
    child.kill()
    raise processes.ProcessDied(
        f"the worker's child process (pid {child.pid}) exited with code 1 before it was ready"
    )


def test_a_child_that_cannot_start_costs_the_job_nothing_and_a_fresh_child_runs_it(
    worker: Worker, slot: processes.ProcessSlot, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    """An import error or a start timeout is not the job's doing (``budgets.py``): the job
    is not failed, it goes to the next child."""
    slot.child.ready = False  # as a replacement child that is still importing the project
    broken = slot.child
    real_wait_ready = processes.Child.wait_ready
    monkeypatch.setattr(
        processes.Child, "wait_ready",
        lambda child, timeout=0: failing_start(child) if child is broken else real_wait_ready(
            child
        ),
    )  # fmt: skip
    job, item = claimed(worker)

    with caplog.at_level(logging.WARNING, logger="django_workqueue.worker"):
        outcome, pending = slot.run(job, item)

    assert outcome is not None and pending
    assert (outcome.kind, outcome.result_json, outcome.error) == (OutcomeKind.SUCCEEDED, "5", None)
    assert slot.child is not broken and slot.child.jobs_run == 1
    assert f"(pid {broken.pid}) exited with code 1 before it was ready; job 1 is not charged" in (
        caplog.text
    )
    assert not worker.stopping.is_set()


def test_children_that_keep_failing_to_start_give_the_job_back_uncharged_and_stop_the_worker(
    worker: Worker, slot: processes.ProcessSlot, monkeypatch: pytest.MonkeyPatch, caplog: Any
) -> None:
    slot.child.ready = False
    monkeypatch.setattr(processes.Child, "wait_ready", failing_start)
    run_to_release(worker, slot, caplog)
    assert f"{processes.HANDOVER_TRIES} child processes in a row could not start" in caplog.text
    assert worker.stopping.is_set()
    assert "before it was ready" in str(worker.processes.failed)  # type: ignore[union-attr]
