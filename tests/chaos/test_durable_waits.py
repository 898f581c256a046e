"""Durable waits under kills: jobs that each sleep 1-3 s and wait for a signal sent from another
process all finish once while workers are SIGKILLed (issue 33, acceptance).

Real ``runworker`` processes under the supervisor; a separate process (``signaller.py``) sends
each job its ``approve`` signal once, in a shuffled order spread over the run, so signals arrive
before the wait (kept) and during it (waking the job). Pass criteria: every job succeeded with
the payload sent to it; each signal was delivered once, to its job; each wait took exactly one
signal; a step's function ran again only in a job a kill orphaned while it ran (its effect
outside the database is at least once, guarantees.md); no worker exited unless killed. Full
size (``WORKQUEUE_CHAOS=full``): 1,000 jobs, 4 workers, 30 kills; fast (CI): 50 jobs, 2
workers, 4 kills. PostgreSQL is the acceptance database; the fast size runs on SQLite too.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections import Counter

import pytest

from django_workqueue.models import Checkpoint, Job, Signal
from django_workqueue.states import TERMINAL, Status
from tests.support.durable_tasks import sleeps_then_waits
from tests.support.processes import REPO_ROOT

from .harness import Ledger, StartWorker, Supervisor, record, size, wait_all_terminal

pytestmark = [pytest.mark.chaos, pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

JOBS = size(50, 1000)
WORKERS = size(2, 4)
SLOTS = size(4, 8)
KILLS = size(4, 30)
SPREAD = size(4.0, 20.0)  # seconds over which the signaller sends its signals
TASKS = {"WORKQUEUE_TASK_MODULES": "tests.support.durable_tasks"}
SEED = 33


def test_sleeping_and_waiting_jobs_all_finish_once_while_workers_are_killed(
    start_worker: StartWorker, worker_env, ledger: Ledger
) -> None:
    rng = random.Random(SEED)
    jobs = sleeps_then_waits.enqueue_many(
        [((), {"ledger": str(ledger), "seconds": rng.uniform(1, 3)}) for _ in range(JOBS)]
    )
    ids = [job.pk for job in jobs]
    supervisor = Supervisor(start_worker, WORKERS, ["--concurrency", str(SLOTS)], env=TASKS)
    supervisor.wait_started()
    signaller = subprocess.Popen(
        [sys.executable, "-m", "tests.chaos.signaller", str(SEED), str(SPREAD), *map(str, ids)],
        cwd=REPO_ROOT, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip

    pace = (SPREAD + 3) / KILLS
    started = time.monotonic()
    while len(supervisor.kills) < KILLS and _unfinished():
        time.sleep(pace)
        supervisor.poll()
        alive = [w for w in supervisor.workers if w.alive]
        victim = supervisor.busy_workers() or alive
        if victim:
            supervisor.kill(rng.choice(victim))
    took = wait_all_terminal(timeout=size(180, 900), supervisor=supervisor)
    out, err = signaller.communicate(timeout=120)
    supervisor.stop_all()

    assert signaller.returncode == 0, err
    assert out.strip() == f"sent {JOBS}"
    assert not supervisor.unexpected_exits, supervisor.describe()
    finished = dict(Job.objects.filter(pk__in=ids).values_list("pk", "status"))
    assert Counter(finished.values()) == {Status.SUCCEEDED: JOBS}
    results = dict(Job.objects.filter(pk__in=ids).values_list("pk", "result"))
    assert all(results[pk]["decision"] == {"job": pk} for pk in ids)
    signals = list(Signal.objects.values_list("job_id", "delivered_to", "delivered_at"))
    assert len(signals) == JOBS  # one each, sent once
    assert all(job == to and at is not None for job, to, at in signals)
    waits = Checkpoint.objects.filter(kind=Checkpoint.Kind.WAIT)
    assert waits.count() == JOBS
    assert all(result == {"payload": {"job": job}} for job, result in
               waits.values_list("job_id", "result"))  # fmt: skip
    starts = Counter(entry.job for entry in ledger.entries() if entry.kind == "start")
    orphaned = {job for kill in supervisor.kills for job, _ in kill.orphans}
    assert set(starts) == set(ids)
    again = {job for job, count in starts.items() if count > 1}
    assert again <= orphaned, f"steps run again outside a kill: {sorted(again - orphaned)}"
    record(
        "durable_waits", jobs=JOBS, workers=WORKERS, kills=len(supervisor.kills),
        steps_run_again=len(again), seconds=round(time.monotonic() - started, 1),
        drain_after_kills=round(took, 1),
    )  # fmt: skip


def _unfinished() -> bool:
    return Job.objects.exclude(status__in=list(TERMINAL)).exists()
