"""A small Django process for the flow-control acceptance tests, run as
``python -m tests.support.flow_process COMMAND ...`` with the environment of
``tests.support.processes.worker_environment`` (the live test database).

* ``claim-race JOB_ID KEYS GO_FILE`` — connects, says so with a file ``GO_FILE.ready.<pid>``,
  waits until GO_FILE exists (so that every process starts together), then claims ``key-0`` …
  ``key-<KEYS-1>`` in a shuffled order through ``JobContext.claim``, and prints the keys it won
  as one JSON line.
* ``skip-queue-sleep SECONDS MARKER`` — enqueues ``sleep_for`` with ``skip_queue=True``: its
  first attempt runs in this process (and writes this pid to MARKER).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path


def claim_race(job_id: int, keys: int, go_file: str) -> None:
    from django_workqueue.context import JobContext
    from django_workqueue.db import ClaimedJob, driver_for

    driver = driver_for("default")
    job = ClaimedJob(
        job_id, "testproject.testapp.tasks.add", "default", 0, 1, 3, 0, 60, None, False, "[[], {}]"
    )
    context = JobContext(job, owner=f"racer-{os.getpid()}", driver=driver)
    order = [f"key-{n}" for n in range(keys)]
    random.shuffle(order)
    driver.now()  # connect before the start, so that the race is between claims
    Path(f"{go_file}.ready.{os.getpid()}").touch()
    deadline = time.monotonic() + 60
    while not Path(go_file).exists():  # a start line for every process
        if time.monotonic() > deadline:
            raise SystemExit("no start signal")
        time.sleep(0.005)
    won = [key for key in order if context.claim(key)]
    print(json.dumps(won), flush=True)


def skip_queue_sleep(seconds: float, marker: str) -> None:
    from testproject.testapp.tasks import sleep_for

    sleep_for.using(skip_queue=True).enqueue(seconds=seconds, marker=marker)


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    command, *args = argv
    if command == "claim-race":
        claim_race(int(args[0]), int(args[1]), args[2])
    elif command == "skip-queue-sleep":
        skip_queue_sleep(float(args[0]), args[1])
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
