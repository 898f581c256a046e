"""``runworker --queues a:8,b:2`` in a real process: the worker registers its budgets; a
``--queues`` that mixes forms, or budgets with ``--concurrency``, stops it at start with a
message naming the fix (exit 1, no traceback, nothing run)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from django_workqueue.models import WorkerProcess
from django_workqueue.states import Status
from testproject.testapp.tasks import add, send_mail
from tests.support.processes import StartWorker, run_manage, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queues", "default:8,mail"], "--queues gives slots to some queues but not to mail"),
        (["--queues", "default:8,mail:2", "--concurrency", "4"],
         "--concurrency cannot be combined with slots per queue"),
        (["--concurrency", "8-2"], "the floor 8 is above the ceiling 2; write MIN-MAX, e.g. 2-8"),
    ],
)  # fmt: skip
def test_slot_options_that_do_not_fit_stop_the_worker_naming_the_fix(
    worker_env: Callable[..., dict[str, str]], args: list[str], message: str
) -> None:
    job = add.enqueue(1, 2)

    completed = run_manage(["runworker", "--burst", *args], worker_env())

    assert completed.returncode in (1, 2), completed
    assert message in completed.stderr, completed.stderr
    assert "Traceback" not in completed.stderr
    job.refresh_from_db()
    assert (job.status, job.attempt) == (Status.READY, 0)
    assert not WorkerProcess.objects.exists()


def test_a_worker_with_slots_per_queue_registers_them_and_runs_both_queues(
    start_worker: StartWorker,
) -> None:
    jobs = [add.enqueue(1, 2), send_mail.enqueue("ada@example.com")]
    worker = start_worker("--queues", "default:3,mail:1")
    worker.wait_started()

    row = WorkerProcess.objects.get(pk=worker.worker_id)
    assert (row.queues, row.queue_slots, row.concurrency) == (
        ["default", "mail"], {"default": 3, "mail": 1}, 4,
    )  # fmt: skip

    def done() -> bool:
        for job in jobs:
            job.refresh_from_db()
        return all(job.status == Status.SUCCEEDED for job in jobs)

    wait_for(done, alive=[worker], timeout=30, message="both queues' jobs ran")
