"""9. SQLite embedded mode: two workers and a web process on one WAL file, workers SIGKILLed.

The embedded deployment: one host, one SQLite file in WAL mode, two real ``runworker`` processes
under a supervisor that restarts them, and a web process (``tests/chaos/webprocess.py``) that
enqueues jobs inside its own transactions next to writes of its own, fails some of those
requests after enqueueing (their transactions roll back), and reads job counts, all while the
test SIGKILLs busy workers. Every process takes turns at the one write lock: the workers' claims,
heartbeats, outcome writes and reaper runs, ``atomic=True`` task bodies, and the web requests.
The web process uses the busy timeout the documentation recommends (5 s); the workers use the
test project's settings (``testproject/settings.py``).

Pass criteria (fast: 2 workers x 4 slots, 300 jobs enqueued up front + 300 web requests, 3 kills;
full: 2 x 8, 5,000 + 5,000, 20 kills):

- 0 jobs lost and every invariant of ``harness.check_invariants``: all succeeded (0 failed),
  re-runs only of attempts whose worker was killed, exactly 1 transactional effect per
  succeeded ``atomic=True`` job;
- 0 job errors that mention "locked" (a ``database is locked`` that reached a job);
- the web process: 0 ``database is locked`` errors in writes or reads, 0 other errors, and its
  transactional enqueue exact: 1 row of its own per committed request naming that request's job,
  and 0 jobs or rows left by the requests that rolled back (the table holds exactly the up-front
  jobs + the committed requests' jobs);
- every planned kill found a busy worker (3 / 20) and 0 workers exited on their own;
- the test database is in WAL mode.

SQLite only by design: it is the embedded mode, whose single write lock is what could surface
as ``database is locked``; PostgreSQL has row locks and no such error.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from django_workqueue.models import Job
from testproject.testapp.models import LedgerEntry
from testproject.testapp.tasks import chaos_atomic, chaos_work
from tests.support.processes import REPO_ROOT
from tests.support.waiting import wait_until

from .harness import (
    Ledger,
    StartWorker,
    Supervisor,
    check_invariants,
    record,
    size,
    wait_all_terminal,
)

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "sqlite",
        reason="SQLite only by design: the embedded mode's one write lock (database is locked)",
    ),
]

WORKERS = 2
SLOTS = size(4, 8)
BACKLOG = size(300, 5_000)  # jobs enqueued up front, so the workers are busy from the start
REQUESTS = size(300, 5_000)  # web requests; one in 7 rolls back after enqueueing
KILLS = size(3, 20)
KILL_EVERY = size(0.5, 2.0)  # seconds between kills
SLEEP = size(0.1, 0.05)  # seconds of work per plain job, so that kills find busy workers


def enqueue_backlog(ledger: Ledger) -> list[int]:
    """BACKLOG jobs, one in four ``atomic=True`` with an empty body (it holds the write lock)."""
    kwargs = {"ledger": str(ledger), "sleep": SLEEP}
    atomic = chaos_atomic.enqueue_many([((), {**kwargs, "sleep": 0.0})] * (BACKLOG // 4))
    plain = chaos_work.enqueue_many([((), kwargs)] * (BACKLOG - BACKLOG // 4))
    return [job.pk for job in atomic + plain]


def start_web(env: dict[str, str], ledger: Ledger, out: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "tests.chaos.webprocess", "--requests", str(REQUESTS),
        "--ledger", str(ledger), "--sleep", str(SLEEP), "--out", str(out),
    ]  # fmt: skip
    stdout, stderr = out.with_suffix(".stdout"), out.with_suffix(".stderr")
    with stdout.open("wb") as out_file, stderr.open("wb") as err_file:
        return subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=out_file, stderr=err_file)


def test_embedded_workers_and_web_process_under_kills(
    start_worker: StartWorker,
    worker_env: Callable[..., dict[str, str]],
    ledger: Ledger,
    tmp_path: Path,
) -> None:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"

    supervisor = Supervisor(start_worker, WORKERS, ["--concurrency", str(SLOTS)], name="emb")
    supervisor.wait_started()
    backlog = enqueue_backlog(ledger)
    out = tmp_path / "web.json"
    rng = random.Random(9)
    started = time.monotonic()
    web = start_web(worker_env(), ledger, out)
    next_kill = started + KILL_EVERY

    def maybe_kill() -> None:
        nonlocal next_kill
        due = len(supervisor.kills) < KILLS and time.monotonic() >= next_kill
        if due and supervisor.kill_busy(rng) is not None:
            next_kill = time.monotonic() + KILL_EVERY

    def web_done() -> bool:
        supervisor.poll()
        maybe_kill()
        return web.poll() is not None

    try:
        wait_until(web_done, timeout=size(120, 900), interval=0.05, message="the web process")
        wait_all_terminal(timeout=size(120, 900), supervisor=supervisor, while_waiting=maybe_kill)
    finally:
        if web.poll() is None:
            web.kill()
        web.wait(timeout=30)
    elapsed = time.monotonic() - started
    assert not supervisor.unexpected_exits, supervisor.describe()
    supervisor.stop_all()

    web_log = out.with_suffix(".stderr").read_text(errors="replace")
    assert web.returncode == 0, f"web process exited {web.returncode}:\n{web_log[-5000:]}"
    summary = json.loads(out.read_text())
    assert summary["locked_writes"] == summary["locked_reads"] == 0, summary["errors"]
    assert summary["errors"] == [], summary["errors"]
    assert summary["committed"] + summary["rolled_back"] == summary["requests"] == REQUESTS
    assert summary["rolled_back"] == REQUESTS // 7

    web_ids = summary["job_ids"]
    web_rows = list(LedgerEntry.objects.filter(note="web").values_list("job_id", flat=True))
    assert sorted(web_rows) == sorted(web_ids), "web rows and web jobs differ"
    all_ids = set(Job.objects.values_list("pk", flat=True))
    assert all_ids == set(backlog) | set(web_ids), (
        f"{len(all_ids)} jobs in the table, expected {len(backlog)} + {len(web_ids)}"
    )

    report = check_invariants(all_ids, ledger, supervisor.faulted)
    print(report)
    report.assert_ok()
    locked_errors = [
        (job_id, error)
        for job_id, errors in Job.objects.values_list("pk", "errors")
        for error in errors
        if "locked" in json.dumps(error).lower()
    ]
    assert not locked_errors, f"'locked' errors reached jobs: {locked_errors[:10]}"
    assert len(supervisor.kills) == KILLS, f"only {len(supervisor.kills)} of {KILLS} kills"

    worker_lines = [
        line for w in supervisor.everyone for line in w.stderr.splitlines() if "locked" in line
    ]
    record(
        "sqlite_embedded",
        workers=WORKERS,
        slots=SLOTS,
        jobs=len(all_ids),
        web_requests=summary["requests"],
        web_committed=summary["committed"],
        web_rolled_back=summary["rolled_back"],
        web_locked=summary["locked_writes"] + summary["locked_reads"],
        web_slowest_write_s=summary["slowest_write_s"],
        kills=len(supervisor.kills),
        orphans=sum(len(kill.orphans) for kill in supervisor.kills),
        reruns=report.duplicate_attempts,
        by_status=report.by_status,
        locked_errors_in_jobs=len(locked_errors),
        worker_log_locked_lines=len(worker_lines),
        seconds=round(elapsed, 2),
    )
