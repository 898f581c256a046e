"""``runworker`` at start: it rejects bad arguments (it exits non-zero, names the problem and runs
nothing), waits for a database it cannot reach yet, and stops at once on one that does not exist."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from django_workqueue.models import Job, WorkerProcess
from django_workqueue.states import Status
from testproject.testapp.tasks import add
from tests.support.processes import (
    MANAGE_PY,
    REPO_ROOT,
    RunworkerProcess,
    run_manage,
    wait_for,
    worker_environment,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    ("args", "expected_code", "message"),
    [
        (["--queues", "nosuch"], 1, "unknown queue(s) nosuch; WORKQUEUE['QUEUES'] has default"),
        (["--queues", " , "], 2, "argument --queues: give at least one queue name"),
        (["--concurrency", "0"], 2, "argument --concurrency: 0 must be at least 1"),
        (["--concurrency", "two"], 2, "argument --concurrency: 'two' is not a whole number"),
        (["--max-jobs", "0"], 2, "argument --max-jobs: 0 must be at least 1"),
        (["--poll-interval", "-1"], 2, "argument --poll-interval: -1 must be more than 0 seconds"),
    ],
)
def test_invalid_arguments_exit_non_zero_naming_the_problem(
    worker_env: Callable[..., dict[str, str]],
    args: list[str],
    expected_code: int,
    message: str,
) -> None:
    job = add.enqueue(1, 2)

    completed = run_manage(["runworker", "--burst", *args], worker_env())

    assert completed.returncode == expected_code, completed
    assert message in completed.stderr, completed.stderr
    assert "runworker" not in completed.stdout  # the start banner was never printed
    # Nothing ran and no worker registered: validation happens before the worker starts.
    job.refresh_from_db()
    assert (job.status, job.attempt) == (Status.READY, 0)
    assert not WorkerProcess.objects.exists()


def test_valid_arguments_run_the_worker(worker_env: Callable[..., dict[str, str]]) -> None:
    """The counterpart: the same invocation with good arguments runs the job and exits 0."""
    job = add.enqueue(1, 2)

    completed = run_manage(
        ["runworker", "--burst", "--queues", "default", "--concurrency", "2",
         "--poll-interval", "0.1"],
        worker_env(),
    )  # fmt: skip

    assert completed.returncode == 0, completed
    job.refresh_from_db()
    assert (job.status, job.attempt, job.result) == (Status.SUCCEEDED, 1, 3)
    assert Job.objects.count() == 1


@pytest.mark.postgres_only  # a server that cannot be reached; SQLite has none
def test_runworker_waits_for_a_database_it_cannot_reach(tmp_path: Path) -> None:
    """A database restart must not make workers crash-loop under a supervisor (systemd gives up
    after a few quick failures): the worker logs and retries, and a SIGTERM still stops it."""
    with socket.socket() as probe:  # bound but never listening: connections to it are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings_dict = {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": port}
    worker = RunworkerProcess("unreachable", [], worker_environment(settings_dict), tmp_path)
    try:
        wait_for(
            lambda: worker.stderr.count("cannot be reached") >= 3, alive=[worker], timeout=60,
            message="3 attempts to reach the database",
        )  # fmt: skip
        assert "Traceback" not in worker.stderr
        worker.send(signal.SIGTERM)  # still stoppable while it waits, and cleanly
        assert worker.wait(timeout=30) == 0
        assert "stopped while waiting for the database" in worker.stdout
    finally:
        worker.kill()


def _runworker(database_url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DATABASE_URL": database_url, "PYTHONUNBUFFERED": "1"}
    env["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    return subprocess.Popen(
        [sys.executable, str(MANAGE_PY), "runworker"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_a_database_that_does_not_exist_stops_runworker_at_once() -> None:
    """No wait cures a missing database or a rejected password: the worker must not wait for
    ever (a deploy check would never see it fail)."""
    process = _runworker("postgres://postgres@127.0.0.1:5432/wq_no_such_database")
    try:
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode != 0
    assert 'database "wq_no_such_database" does not exist' in stderr
    assert "retrying" not in stderr
