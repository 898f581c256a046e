"""Signals: the exact order of every job's, workflow's and worker's signals on each path, sent
once the change has committed, and receivers that raise (SQLite and PostgreSQL).

Workers run in this thread (``drain``) or on their own: every test uses committed data.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections, transaction
from django.dispatch import Signal
from django.utils import timezone

from django_workqueue import chain, signals
from django_workqueue.maintenance import reaper
from django_workqueue.models import Job, Workflow
from django_workqueue.operations import (
    cancel_job,
    cancel_jobs,
    cancel_workflow,
    complete_job,
    fail_job,
    send_signal,
)
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from testproject.testapp.tasks import (
    add,
    always_fails,
    async_add,
    atomic_effect,
    discard_me,
    double,
    echo,
    fail_step,
    flaky,
    record,
    snooze_once,
    wait_for_cancel,
)
from tests.support import durable_tasks
from tests.support.database import fresh
from tests.support.factories import JobFactory
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

NAMES = [name for name in signals.__all__]
WORKER_SIGNALS = {"worker_started", "worker_stopping", "worker_stopped"}


class Recorder:
    """Receives every signal; keeps (name, kwargs, sender) in the order they arrived."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], Any]] = []
        self.lock = threading.Lock()
        self._receivers: list[tuple[Signal, Any]] = []

    def connect(self) -> None:
        for name in NAMES:
            signal = getattr(signals, name)

            def receive(sender: Any, *, _name: str = name, **kwargs: Any) -> None:
                kwargs.pop("signal")
                with self.lock:
                    self.events.append((_name, kwargs, sender))

            signal.connect(receive, weak=False)
            self._receivers.append((signal, receive))

    def disconnect(self) -> None:
        for signal, receive in self._receivers:
            signal.disconnect(receive)

    def jobs(self, *fields: str) -> list[tuple[Any, ...]]:
        """The job and workflow signals: (name, *the kwargs named)."""
        with self.lock:
            events = list(self.events)
        return [
            (name, *(kwargs.get(field) for field in fields))
            for name, kwargs, _ in events
            if name not in WORKER_SIGNALS
        ]

    def names(self) -> list[str]:
        with self.lock:
            return [name for name, _, _ in self.events]


def status_elsewhere(job_id: int) -> str:
    """The job's status as another connection sees it (what has committed)."""
    found: list[str] = []

    def read() -> None:
        try:
            found.append(Job.objects.get(pk=job_id).status)
        finally:
            connections.close_all()

    thread = threading.Thread(target=read)
    thread.start()
    thread.join(10)
    return found[0]


@pytest.fixture
def received() -> Iterator[Recorder]:
    recorder = Recorder()
    recorder.connect()
    yield recorder
    recorder.disconnect()


def test_every_documented_signal_is_exported():
    assert sorted(NAMES) == sorted(
        ["job_enqueued", "job_started", "job_succeeded", "job_retrying", "job_failed",
         "job_cancelled", "job_snoozed", "job_reaped", "job_woken", "workflow_finished",
         "worker_started", "worker_stopping", "worker_stopped"]
    )  # fmt: skip
    assert all(isinstance(getattr(signals, name), Signal) for name in NAMES)


# --- the paths of a job ---------------------------------------------------------------------


def test_a_success_sends_enqueued_started_succeeded_with_the_task_as_sender(received, drain):
    job = record.enqueue(note="x")
    worker = drain()

    assert received.jobs("job_id", "attempt", "task_name", "queue") == [
        ("job_enqueued", job.pk, 0, record.name, "default"),
        ("job_started", job.pk, 1, record.name, "default"),
        ("job_succeeded", job.pk, 1, record.name, "default"),
    ]
    senders = {name: sender for name, _, sender in received.events if name.startswith("job_")}
    assert senders == {"job_enqueued": record, "job_started": record, "job_succeeded": record}
    worker_ids = [k["worker_id"] for n, k, _ in received.events if n != "job_enqueued"]
    assert set(worker_ids) == {worker.id}


def test_a_retry_sends_retrying_with_the_error_and_delay_then_runs_again(received, drain):
    job = flaky.enqueue(succeed_on=2)
    drain()

    assert received.jobs("job_id", "attempt") == [
        ("job_enqueued", job.pk, 0),
        ("job_started", job.pk, 1),
        ("job_retrying", job.pk, 1),
        ("job_started", job.pk, 2),
        ("job_succeeded", job.pk, 2),
    ]
    [(_, retrying, _)] = [e for e in received.events if e[0] == "job_retrying"]
    assert retrying["error"]["type"] == "builtins.ConnectionError"
    assert retrying["error"]["message"] == "flaky failure on attempt 1"
    assert retrying["delay"] == 0


def test_spent_attempts_send_failed_with_the_last_error(received, drain):
    job = always_fails.enqueue()
    drain()

    assert received.jobs("attempt") == [
        ("job_enqueued", 0),
        ("job_started", 1), ("job_retrying", 1),
        ("job_started", 2), ("job_retrying", 2),
        ("job_started", 3), ("job_failed", 3),
    ]  # fmt: skip
    [(_, failed, _)] = [e for e in received.events if e[0] == "job_failed"]
    assert (failed["job_id"], failed["error"]["message"]) == (job.pk, "boom on attempt 3")
    assert fresh(job).status == "failed"


def test_a_discard_sends_failed_at_once(received, drain):
    discard_me.enqueue()
    drain()

    assert received.jobs("attempt") == [("job_enqueued", 0), ("job_started", 1), ("job_failed", 1)]


def test_a_signal_that_wakes_a_waiting_job_sends_woken_once_committed(received, drain):
    job = durable_tasks.waits_for_approval.enqueue()
    drain()
    with pytest.raises(RuntimeError), transaction.atomic():
        send_signal(job, "approve")
        raise RuntimeError("rolled back")
    assert "job_woken" not in received.names()

    send_signal(job, "approve", {"by": "ada"})

    woken = [event for event in received.jobs("job_id", "attempt", "worker_id")
             if event[0] == "job_woken"]  # fmt: skip
    assert woken == [("job_woken", job.pk, 1, None)]
    assert fresh(job).status == Status.READY


def test_a_snooze_sends_snoozed_with_its_delay_then_runs_again(received, drain):
    job = snooze_once.enqueue(delay=0)
    drain()

    assert received.jobs("job_id", "attempt", "delay") == [
        ("job_enqueued", job.pk, 0, None),
        ("job_started", job.pk, 1, None),
        ("job_snoozed", job.pk, 1, 0),
        ("job_started", job.pk, 2, None),
        ("job_succeeded", job.pk, 2, None),
    ]


def test_an_atomic_task_sends_succeeded_after_its_own_transaction_commits(received, drain):
    seen: list[str] = []

    def look(sender: Any, job_id: int, **kwargs: Any) -> None:
        seen.append(status_elsewhere(job_id))

    signals.job_succeeded.connect(look, weak=False)
    try:
        job = atomic_effect.enqueue(value="v")
        failing = atomic_effect.using(max_attempts=1).enqueue(fail=True)
        drain(concurrency=1)
    finally:
        signals.job_succeeded.disconnect(look)

    assert seen == ["succeeded"]
    assert received.jobs("job_id") == [
        ("job_enqueued", job.pk), ("job_enqueued", failing.pk),
        ("job_started", job.pk), ("job_succeeded", job.pk),
        ("job_started", failing.pk), ("job_failed", failing.pk),
    ]  # fmt: skip


def test_an_async_task_sends_started_and_succeeded(received, drain):
    job = async_add.enqueue(1, 2)
    drain()

    assert received.jobs("job_id") == [
        ("job_enqueued", job.pk), ("job_started", job.pk), ("job_succeeded", job.pk),
    ]  # fmt: skip


def test_a_batch_tasks_jobs_each_send_started_and_their_outcome(received, drain):
    from testproject.testapp.tasks import batch_double, batch_fails

    doubled = batch_double.enqueue_many([((1,), {}), ((2,), {})])
    failing = batch_fails.using(max_attempts=1).enqueue(1)
    drain()

    events = received.jobs("job_id")
    for job in doubled:
        mine = [name for name, pk in events if pk == job.pk]
        assert mine == ["job_enqueued", "job_started", "job_succeeded"]
    assert [name for name, pk in events if pk == failing.pk] == [
        "job_enqueued", "job_started", "job_failed",
    ]  # fmt: skip


# --- cancellation, operations, the reaper ---------------------------------------------------


def test_cancelling_a_waiting_job_sends_cancelled(received):
    job = add.enqueue(1, 2)
    cancel_job(job)

    assert received.jobs("job_id", "attempt", "task_name") == [
        ("job_enqueued", job.pk, 0, add.name),
        ("job_cancelled", job.pk, 0, add.name),
    ]


def test_cancel_jobs_sends_cancelled_for_each_waiting_job(received):
    jobs = add.enqueue_many([((1, 2), {}), ((3, 4), {})])
    cancel_jobs(Job.objects.filter(pk__in=[j.pk for j in jobs]))

    assert received.jobs("job_id") == [
        ("job_enqueued", jobs[0].pk), ("job_enqueued", jobs[1].pk),
        ("job_cancelled", jobs[0].pk), ("job_cancelled", jobs[1].pk),
    ]  # fmt: skip


def test_a_running_job_that_stops_on_cancel_sends_cancelled_from_its_worker(
    received, background_worker
):
    job = wait_for_cancel.enqueue()
    worker = background_worker()
    wait_until(lambda: fresh(job).status == "running", message="the job to start")
    cancel_job(job)
    wait_until(lambda: "job_cancelled" in received.names(), message="job_cancelled")

    assert received.jobs("job_id", "attempt", "worker_id") == [
        ("job_enqueued", job.pk, 0, None),
        ("job_started", job.pk, 1, worker.id),
        ("job_cancelled", job.pk, 1, worker.id),
    ]


def test_complete_job_and_fail_job_send_succeeded_and_failed(received):
    done, rejected = add.enqueue(1, 2), add.enqueue(3, 4)
    complete_job(done, 3)
    fail_job(rejected, "rejected by the manager")

    assert received.jobs("job_id") == [
        ("job_enqueued", done.pk), ("job_enqueued", rejected.pk),
        ("job_succeeded", done.pk), ("job_failed", rejected.pk),
    ]  # fmt: skip
    [(_, failed, _)] = [e for e in received.events if e[0] == "job_failed"]
    assert failed["error"]["message"] == "rejected by the manager"


def test_a_reaped_job_sends_reaped_naming_the_worker_that_stopped(received):
    job = JobFactory(running=True, lease_owner="worker-gone", task_name=add.name)
    assert reaper.run_once(now=job.lease_expires_at + timezone.timedelta(seconds=1)) == 1

    assert received.jobs("job_id", "attempt", "worker_id", "status", "task_name") == [
        ("job_reaped", job.pk, 1, "worker-gone", "ready", add.name),
    ]
    [(_, _, sender)] = received.events
    assert sender is add


def test_a_reaped_job_with_its_crash_budget_spent_sends_reaped_then_failed(received):
    job = JobFactory(running=True, attempt=3, max_attempts=3, crashes_charged=2)
    assert reaper.run_once(now=job.lease_expires_at + timezone.timedelta(seconds=1)) == 1

    assert received.jobs("job_id", "status") == [
        ("job_reaped", job.pk, "failed"),
        ("job_failed", job.pk, None),
    ]
    [(_, failed, _)] = [e for e in received.events if e[0] == "job_failed"]
    assert failed["error"]["type"] == "LeaseExpired"


# --- workflows ------------------------------------------------------------------------------


def test_a_workflow_sends_finished_after_its_last_job(received, drain):
    wf = chain(echo.s(1), double.s()).enqueue()
    first, second = Job.objects.filter(workflow=wf).order_by("id")
    drain(concurrency=1)

    assert received.jobs("job_id", "workflow_id", "status") == [
        ("job_enqueued", first.pk, None, None),
        ("job_enqueued", second.pk, None, None),
        ("job_started", first.pk, None, None),
        ("job_succeeded", first.pk, None, None),
        ("job_started", second.pk, None, None),
        ("job_succeeded", second.pk, None, None),
        ("workflow_finished", None, wf.pk, "succeeded"),
    ]
    [(_, _, sender)] = [e for e in received.events if e[0] == "workflow_finished"]
    assert sender is Workflow


def test_a_failed_step_cancels_its_dependent_and_the_workflow_finishes_failed(received, drain):
    wf = chain(fail_step.s(), echo.s()).enqueue()
    first, second = Job.objects.filter(workflow=wf).order_by("id")
    drain(concurrency=1)

    assert received.jobs("job_id", "workflow_id", "status") == [
        ("job_enqueued", first.pk, None, None),
        ("job_enqueued", second.pk, None, None),
        ("job_started", first.pk, None, None),
        ("job_failed", first.pk, None, None),
        ("job_cancelled", second.pk, None, None),
        ("workflow_finished", None, wf.pk, "failed"),
    ]


def test_cancel_workflow_sends_cancelled_for_its_jobs_then_finished(received):
    wf = chain(echo.s(1), double.s()).enqueue()
    first, second = Job.objects.filter(workflow=wf).order_by("id")
    cancel_workflow(wf)

    assert received.jobs("job_id", "workflow_id", "status") == [
        ("job_enqueued", first.pk, None, None),
        ("job_enqueued", second.pk, None, None),
        ("job_cancelled", first.pk, None, None),
        ("job_cancelled", second.pk, None, None),
        ("workflow_finished", None, wf.pk, "cancelled"),
    ]


# --- the worker -----------------------------------------------------------------------------


def test_a_worker_sends_started_first_and_stopping_then_stopped_last(received, drain):
    add.enqueue(1, 2)
    worker = drain()

    assert received.names() == [
        "job_enqueued", "worker_started", "job_started", "job_succeeded",
        "worker_stopping", "worker_stopped",
    ]  # fmt: skip
    lifecycle = [(n, k, s) for n, k, s in received.events if n in WORKER_SIGNALS]
    for _, kwargs, sender in lifecycle:
        assert sender is Worker
        assert (kwargs["worker"], kwargs["worker_id"], kwargs["queues"]) == (
            worker,
            worker.id,
            worker.queues,
        )


# --- after commit, and receivers that raise --------------------------------------------------


def test_enqueue_in_a_transaction_sends_at_commit_and_a_rollback_sends_nothing(received):
    with transaction.atomic():
        job = add.enqueue(1, 2)
        assert received.events == []
    assert received.jobs("job_id") == [("job_enqueued", job.pk)]

    with pytest.raises(RuntimeError), transaction.atomic():
        add.enqueue(3, 4)
        raise RuntimeError("roll back")
    assert received.jobs("job_id") == [("job_enqueued", job.pk)]


def test_enqueue_many_sends_one_signal_per_job_in_order(received):
    jobs = add.enqueue_many([((1, 2), {}), ((3, 4), {}), ((5, 6), {})])

    assert received.jobs("job_id") == [("job_enqueued", job.pk) for job in jobs]


def test_a_receiver_that_raises_is_logged_and_the_job_still_succeeds(received, drain, caplog):
    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("a broken receiver")

    signals.job_started.connect(broken, weak=False)
    signals.job_succeeded.connect(broken, weak=False)
    try:
        with caplog.at_level(logging.ERROR, logger="django.dispatch"):
            job = add.enqueue(1, 2)
            drain()
    finally:
        signals.job_started.disconnect(broken)
        signals.job_succeeded.disconnect(broken)

    assert (fresh(job).status, fresh(job).result) == ("succeeded", 3)
    assert received.jobs("job_id") == [
        ("job_enqueued", job.pk), ("job_started", job.pk), ("job_succeeded", job.pk),
    ]  # fmt: skip
    logged = [r for r in caplog.records if r.name == "django.dispatch"]
    assert len(logged) == 2
    assert all(r.exc_info and str(r.exc_info[1]) == "a broken receiver" for r in logged)


def test_a_receiver_connected_for_one_task_hears_only_that_task(drain):
    heard: list[int] = []

    def receive(sender: Any, job_id: int, **kwargs: Any) -> None:
        heard.append(job_id)

    signals.job_succeeded.connect(receive, sender=add, weak=False)
    try:
        mine = add.enqueue(1, 2)
        echo.enqueue("other")
        drain()
    finally:
        signals.job_succeeded.disconnect(receive, sender=add)

    assert heard == [mine.pk]
