"""``manage.py workqueue`` in a real pseudo-terminal 80 and 120 columns wide, on SQLite and
PostgreSQL: a table fits the terminal without losing what the other subcommands take (a job's
id), what the job is (its task) and where it stands (its status); long text is cut, then the
least needed columns drop, and the table says which; ``--wide`` shows every column whole."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.utils import timezone

from django_workqueue import operations
from django_workqueue.models import Job, WorkerProcess
from testproject.testapp.tasks import add, always_fails, send_mail
from tests.support.processes import worker_environment
from tests.support.terminal import run_in_terminal

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_ID = str(uuid.UUID(int=0x3F2A9C1E7B4D4E0F9A8B1C2D3E4F5A6B))


@pytest.fixture
def env(drain):
    """Finished, failed (a long message), ready, scheduled and held jobs; a paused queue;
    a live worker with a long host name."""
    add.enqueue(1, 2)
    always_fails.enqueue()
    drain(queues=["default"])
    Job.objects.filter(status="failed").update(
        errors=[{"type": "builtins.ValueError", "message": "the partner API answered 503 " * 4}]
    )
    send_mail.enqueue("ops@example.com", subject="hello")
    add.using(delay=3600).enqueue(5, 5)
    operations.hold_job(add.enqueue(6, 6))
    operations.pause_queue("reports")
    WorkerProcess.objects.all().delete()
    WorkerProcess.objects.create(
        id=WORKER_ID, host="worker-host-17.eu-west-1.compute.internal", pid=4242,
        queues=["default", "mail", "reports", "low"], concurrency=8, running=1,
        started_at=timezone.now(), last_seen_at=timezone.now(),
    )  # fmt: skip
    return worker_environment(connection.settings_dict)


def shown(env, columns, *args):
    code, text = run_in_terminal(["workqueue", *args], env, columns)
    assert code == 0, text
    lines = text.splitlines()
    assert max(map(len, lines)) <= columns, text
    return text, lines


def job_lines(lines):
    header = next(n for n, line in enumerate(lines) if line.split()[:2] == ["id", "task"])
    return lines[header], [line for line in lines[header + 2 :] if line[:4].strip().isdigit()]


@pytest.mark.parametrize("columns", [80, 120])
def test_jobs_keeps_the_id_task_and_status_of_every_job(env, columns):
    _, lines = shown(env, columns, "jobs")

    header, rows = job_lines(lines)
    assert header.split()[:2] == ["id", "task"] and "status" in header.split()
    jobs = {job.pk: job for job in Job.objects.all()}
    assert [int(row.split()[0]) for row in rows] == sorted(jobs, reverse=True)
    for row in rows:
        job = jobs[int(row.split()[0])]
        # A cut task name keeps its end, where the names of one module differ.
        assert job.task_name.rpartition(".")[2] in row.split()[1]
        assert job.status in row.split()


def test_at_80_columns_jobs_says_which_columns_it_left_out(env):
    _, lines = shown(env, 80, "jobs")

    header, _ = job_lines(lines)
    note = next(line for line in lines if line.startswith("Not shown at this width: "))
    left_out = note.removeprefix("Not shown at this width: ").split(" (")[0].split(", ")
    assert "since" in left_out
    assert sorted(header.replace("last error", "last_error").split() + left_out) == sorted(
        ["id", "task", "queue", "status", "attempt", "since", "last_error"]
    )


def test_at_120_columns_jobs_shows_every_column(env):
    text, lines = shown(env, 120, "jobs")

    header, _ = job_lines(lines)
    assert header.split() == ["id", "task", "queue", "status", "attempt", "since", "last", "error"]
    assert "testproject.testapp.tasks.always_fails" in text
    assert "Not shown" not in text


def test_wide_shows_every_column_whole_past_the_edge(env):
    code, text = run_in_terminal(["workqueue", "jobs", "--wide"], env, 80)

    assert code == 0
    assert "the partner API answered 503 " * 3 in text
    assert "testproject.testapp.tasks.always_fails" in text and "Not shown" not in text


@pytest.mark.parametrize("columns", [80, 120])
def test_status_shows_every_count_of_every_queue(env, columns):
    _, lines = shown(env, columns, "status")

    headers = [line.split() for line in lines if line.startswith("queue ")]
    assert sorted(name for header in headers for name in header[1:]) == sorted(
        [
            "blocked",
            "scheduled",
            "ready",
            "held",
            "waiting",
            "running",
            "succeeded",
            "failed",
            "cancelled",
        ]
    )
    assert len(headers) == (2 if columns == 80 else 1)  # split in two where it does not fit
    assert any(line.startswith("reports (paused)") for line in lines)


@pytest.mark.parametrize("columns", [80, 120])
def test_workers_keeps_the_worker_its_host_and_its_running_count(env, columns):
    _, lines = shown(env, columns, "workers")

    row = next(line for line in lines if line.startswith(WORKER_ID[:12]))
    header = next(line for line in lines if line.startswith("worker "))
    assert {"worker", "host", "running"} <= set(header.split())
    assert "worker-host-17" in row
    assert row.split()[header.split().index("running")] == "1"
