"""A task's body that raises ``SystemExit``, ``KeyboardInterrupt`` or ``GeneratorExit`` in a real
``runworker --burst`` (the thread pool and the process pool): the attempt fails like any other,
with the exception's class in ``errors`` and retried under the task's policy, and the worker goes
on to its other jobs and exits 0. In the process pool the child reports the failure instead of
looking dead (no ``ProcessDied``). The in-process paths are in
tests/integration/test_body_base_exceptions.py. Both databases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from django_workqueue.states import Status
from testproject.testapp.tasks import add, batch_exits, exits, exits_async
from tests.support.database import fresh
from tests.support.processes import run_manage

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

POOLS = {"threads": ["--pool", "threads"], "processes": ["--pool", "processes"]}
KINDS = ["SystemExit", "KeyboardInterrupt", "GeneratorExit"]


@pytest.mark.parametrize("pool", list(POOLS))
def test_a_burst_worker_fails_each_body_exit_and_exits_0(
    worker_env: Callable[..., dict[str, str]], pool: str
) -> None:
    jobs = [(task, kind, task.enqueue(kind)) for kind in KINDS for task in (exits, exits_async)]
    retried = exits.using(max_attempts=2).enqueue("SystemExit")
    batch = [batch_exits.enqueue("SystemExit") for _ in range(2)]
    after = add.enqueue(1, 2)

    completed = run_manage(
        ["runworker", "--burst", "--queues", "default", "--concurrency", "2", *POOLS[pool]],
        worker_env(),
    )

    assert completed.returncode == 0, completed
    for task, kind, job in jobs:
        _assert_failed_by(job, kind, 1, f"{task.name}({kind})")
    _assert_failed_by(retried, "SystemExit", 2, "exits(SystemExit), max_attempts=2")
    for job in batch:
        _assert_failed_by(job, "SystemExit", 1, "batch_exits(SystemExit)")
    assert (fresh(after).status, fresh(after).result) == (Status.SUCCEEDED, 3)


def _assert_failed_by(job: Any, kind: str, attempts: int, what: str) -> None:
    job = fresh(job)
    assert (job.status, job.attempt) == (Status.FAILED, attempts), (what, job.errors)
    assert [error["type"] for error in job.errors] == [f"builtins.{kind}"] * attempts, what
