"""Racing unique enqueues from real processes, each with its own connection: the database's
constraints decide, so however the enqueues interleave there is one job per key."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.db import connection

from django_workqueue.models import Job
from tests.support.processes import REPO_ROOT, worker_environment

pytestmark = pytest.mark.django_db(transaction=True)

PROCESSES = 8
ENQUEUES = 20

# Each process connects, says it is ready, waits for the word, then enqueues as fast as it can
# and prints (pk, duplicate) of every returned job.
SCRIPT = """
import json, sys
import django
django.setup()
from tests.support import tasks
from django.db import connection
connection.ensure_connection()
task, args = getattr(tasks, sys.argv[1]), json.loads(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()
results = [task.enqueue(*args) for _ in range({enqueues})]
print(json.dumps([[job.pk, job.duplicate] for job in results]), flush=True)
"""


def race(task_name: str, args: list) -> list[tuple[int, bool]]:
    env = worker_environment(connection.settings_dict)
    script = SCRIPT.replace("{enqueues}", str(ENQUEUES))
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, task_name, json.dumps(args)],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for process in processes:  # every process is connected before any enqueues
            assert process.stdout.readline().strip() == "ready", process.stderr.read()
        for process in processes:
            process.stdin.write("go\n")
            process.stdin.flush()
        results = []
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            results += [tuple(pair) for pair in json.loads(out)]
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize(
    ("task_name", "args"),
    [
        ("sync_customer", [7]),  # keep
        ("debounced_sync", [7]),  # replace
        ("rebuild_sitemap", []),  # unique_for window
    ],
)
def test_racing_processes_enqueueing_one_key_make_exactly_one_job(task_name, args):
    results = race(task_name, args)
    assert len(results) == PROCESSES * ENQUEUES
    jobs = list(Job.objects.all())
    assert len(jobs) == 1
    # Every enqueue got that job back, and exactly one of them created it.
    assert {pk for pk, _ in results} == {jobs[0].pk}
    assert sorted(duplicate for _, duplicate in results).count(False) == 1
