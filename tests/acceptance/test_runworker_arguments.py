"""``runworker`` at start: bad arguments, a database it cannot use and a registry without tasks
stop it with a message naming the problem and the fix (exit 1 or 2, no traceback, nothing run);
a good start says so once, and lists the registered tasks at ``-v 2``."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_workqueue import discovery, registry
from django_workqueue.management.commands import runworker
from django_workqueue.models import Job, WorkerProcess
from django_workqueue.registry import registered_tasks
from django_workqueue.states import Status
from testproject.testapp.tasks import add
from tests.support.database import fresh
from tests.support.processes import (
    RunworkerProcess,
    database_url,
    run_manage,
    wait_for,
    worker_environment,
)

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    ("args", "expected_code", "message"),
    [
        (
            ["--queues", "nosuch"],
            1,
            "unknown queue(s) nosuch; the queues (WORKQUEUE['QUEUES'] and the TASKS aliases' "
            "QUEUES) are default",
        ),
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
    assert "started: queues=" not in completed.stdout + completed.stderr  # the worker never ran
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


# --- the start line and the registered tasks ---------------------------------------------------


def start_lines(completed: subprocess.CompletedProcess[str]) -> list[str]:
    output = completed.stdout + completed.stderr
    return [line for line in output.splitlines() if "queues=" in line]


def test_the_start_line_is_written_once(worker_env: Callable[..., dict[str, str]]) -> None:
    completed = run_manage(["runworker", "--burst", "--concurrency", "3"], worker_env())

    assert completed.returncode == 0, completed
    [line] = start_lines(completed)
    pattern = r"worker \S+ started: queues=\[.*'default'.*\] concurrency=3 pool=threads"
    assert re.fullmatch(pattern, line), line


def test_verbosity_2_lists_the_registered_tasks_with_their_queues(
    worker_env: Callable[..., dict[str, str]],
) -> None:
    listed = run_manage(["runworker", "--burst", "-v", "2"], worker_env())
    quiet = run_manage(["runworker", "--burst"], worker_env())

    assert (listed.returncode, quiet.returncode) == (0, 0), (listed, quiet)
    # The worker's registry is what autodiscovery imported (this process has test tasks too).
    discovered = {
        name: task
        for name, task in registered_tasks().items()
        if task.spec.func.__module__ in ("testproject.testapp.tasks", "testproject.demo.tasks")
    }
    expected = [f"  {name} (queue {task.spec.queue})" for name, task in sorted(discovered.items())]
    lines = listed.stderr.splitlines()
    header = lines.index(f"{len(expected)} registered task(s):")
    assert [line for line in lines if "(queue " in line] == expected
    assert lines[header + 1 : header + 1 + len(expected)] == expected
    assert "  testproject.testapp.tasks.send_mail (queue mail)" in expected
    assert "registered task(s)" not in quiet.stderr
    assert len(start_lines(listed)) == 1


# --- nothing to run -----------------------------------------------------------------------------


@pytest.fixture
def no_tasks() -> Iterator[dict[str, str]]:
    """An empty registry, as in a project without a tasks.py; yields the import errors."""
    failed: dict[str, str] = {}
    with (
        mock.patch.dict(registry._registry, clear=True),
        mock.patch.dict(discovery.import_errors, failed, clear=True),
    ):
        yield discovery.import_errors


def test_a_worker_without_any_task_refuses_to_start(no_tasks: dict[str, str]) -> None:
    """Every job it claimed would fail with TaskNotRegistered: refusing names the fix at once.
    The refusal comes before anything else (signal handlers, the database, the worker)."""
    job = add.enqueue(1, 2)
    with mock.patch.object(runworker, "Worker") as worker, pytest.raises(CommandError) as raised:
        call_command("runworker", burst=True)

    assert str(raised.value) == (
        "no task is registered: no module imported at start-up (the tasks.py of each app in "
        "INSTALLED_APPS, and WORKQUEUE['TASK_MODULES']) defines a @task. Put your tasks in a "
        "tasks.py of an installed app, or list the modules that define them in "
        "WORKQUEUE['TASK_MODULES']"
    )
    worker.assert_not_called()
    assert fresh(job).status == Status.READY


def test_a_worker_whose_every_task_module_failed_refuses_naming_them(
    no_tasks: dict[str, str],
) -> None:
    no_tasks["shop.tasks"] = "RuntimeError: settings.PAYMENT_API_KEY is missing"
    no_tasks["mail.tasks"] = "ImportError: cannot import name 'send' from 'smtp'"
    with pytest.raises(CommandError) as raised:
        call_command("runworker", burst=True)

    assert str(raised.value) == (
        "no task is registered: every task module failed to import: mail.tasks (ImportError: "
        "cannot import name 'send' from 'smtp'); shop.tasks (RuntimeError: "
        "settings.PAYMENT_API_KEY is missing). Fix the import error and start the worker again"
    )


def test_a_worker_without_any_task_exits_1_with_the_message(
    worker_env: Callable[..., dict[str, str]],
) -> None:
    """The same refusal in a real process: exit status 1, the message, no traceback."""
    completed = run_manage(
        ["runworker", "--burst", "--settings", "tests.acceptance.settings_without_tasks"],
        worker_env(),
    )

    assert completed.returncode == 1, completed
    assert "CommandError: no task is registered: no module imported at start-up" in (
        completed.stderr
    )
    assert "Traceback" not in completed.stderr
    assert not start_lines(completed)


# --- a database the worker cannot use ------------------------------------------------------------


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
        assert "SIGTERM: stopped while starting, before the first claim" in worker.stderr
    finally:
        worker.kill()


def unusable(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    completed = run_manage(["runworker", "--burst"], env, timeout=60)
    assert completed.returncode == 1, completed
    assert "Traceback" not in completed.stderr, completed.stderr
    assert "retrying" not in completed.stderr  # no wait cures it: it stops at once
    return completed


@pytest.mark.postgres_only
def test_a_postgresql_database_that_does_not_exist_stops_runworker_naming_it(
    worker_env: Callable[..., dict[str, str]],
) -> None:
    url = database_url({**connection.settings_dict, "NAME": "wq_no_such_database"})

    completed = unusable(worker_env(DATABASE_URL=url))

    assert (
        "CommandError: cannot use database 'default': database 'wq_no_such_database' does not "
        "exist on the server (" in completed.stderr
    )
    assert 'database "wq_no_such_database" does not exist)' in completed.stderr
    assert (
        "create it (e.g. createdb wq_no_such_database) and run 'manage.py migrate --database "
        "default', or correct DATABASES['default']['NAME']"
    ) in completed.stderr


@pytest.mark.postgres_only
def test_a_postgresql_role_the_server_rejects_stops_runworker_naming_the_fix(
    worker_env: Callable[..., dict[str, str]],
) -> None:
    url = database_url({**connection.settings_dict, "USER": "wq_no_such_role"})

    completed = unusable(worker_env(DATABASE_URL=url))

    name = connection.settings_dict["NAME"]
    assert (
        f"CommandError: cannot use database 'default': the server refused the role or password "
        f"for database {name!r} (" in completed.stderr
    )
    assert "correct DATABASES['default']['USER'] and ['PASSWORD']" in completed.stderr


def test_a_sqlite_file_in_a_directory_that_does_not_exist_stops_runworker_naming_it(
    worker_env: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    path = tmp_path / "no" / "such" / "directory" / "jobs.sqlite3"

    completed = unusable(worker_env(DATABASE_URL=f"sqlite:///{path}"))

    assert (
        f"CommandError: cannot use database 'default': the directory "
        f"'{path.parent}' of database file '{path}' does not exist; create it and run "
        f"'manage.py migrate --database default', or correct DATABASES['default']['NAME']"
    ) in completed.stderr
    assert not path.parent.exists()  # nothing was created on the way


def test_a_sqlite_database_path_that_is_a_directory_stops_runworker_naming_it(
    worker_env: Callable[..., dict[str, str]], tmp_path: Path
) -> None:
    path = tmp_path / "jobs.sqlite3"
    path.mkdir()  # a path SQLite cannot open as a file

    completed = unusable(worker_env(DATABASE_URL=f"sqlite:///{path}"))

    assert (
        f"CommandError: cannot use database 'default': database file '{path}' cannot be opened "
        f"(unable to open database file); check that this user may read and write it and its "
        f"directory, or correct DATABASES['default']['NAME']"
    ) in completed.stderr
