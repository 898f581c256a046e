"""Progress reports never cost a job its outcome, and a locked row stalls nothing else.

A worker's control thread writes the progress reports of every job it runs next to their
outcomes and its heartbeat. A report the database cannot store as given (a NUL-filled message,
a counter beyond bigint) or a row another session keeps locked (``select_for_update()`` in a
view, ``cancel_job()`` inside ``atomic()``) must cost neither that job's outcome nor any other
job's: a real ``runworker --burst --concurrency 4`` drains 63 jobs and exits by itself.

The batch: 60 short jobs (2 s leases, each reports once), one reporting ``"\\x00" * 500``, one
reporting counters just beyond bigint (``set_progress`` refuses them with ``ValueError`` in the
task, which records it), and one reporting every 10 ms for 3 s. On PostgreSQL the test's own
session holds that last job's row ``SELECT ... FOR UPDATE`` for 8 s from the moment it runs,
longer than the worker's writes' 2 s ``lock_timeout``; the other 62 jobs must all finish while
the row is locked, and the locked job once it is released. SQLite has no row locks: there the
same batch runs without one.

Pass criteria: the worker exits by itself, with code 0, within 33 s of its start (on
PostgreSQL, of the lock's end); all 63 jobs succeeded on attempt 1 and none is left running;
exactly one ledger row (one body run) per job; the NUL message is stored as 500 characters of
its escaped text; the three out-of-range reports raised ``ValueError`` naming the range, and the
largest bigint was stored; the frequent reporter's last report, and every short job's one
report, were stored. On PostgreSQL, besides: the row was locked while its body still reported,
and the other 62 jobs all succeeded before the lock ended.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import pytest
from django.db import connections, transaction

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.models import LedgerEntry
from testproject.testapp.tasks import (
    BEYOND_BIGINT,
    progress_beyond_bigint,
    progress_message,
    progress_often,
    progress_short,
)
from tests.support.processes import StartWorker, WorkerExited, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

SHORT_JOBS = 60
SHORT_SLEEP = 0.05
CONCURRENCY = 4
REPORT_SECONDS = 3.0  # the frequent reporter's body, reporting every 10 ms
HOLD_SECONDS = 8.0  # the row lock: longer than the body and than the 2 s lock_timeout
EXIT_TIMEOUT = 30.0  # after the last body ended (and the lock was released)
# The message made storable first (each NUL becomes the 4 characters \x00), then cut to 500.
STORED_NUL_MESSAGE = "\\x00" * 125
LARGEST_BIGINT = 2**63 - 1
# A refusal names the bigint range in one of these spellings.
RANGE_SPELLINGS = ("9223372036854775807", "9,223,372,036,854,775,807", "2**63", "2 ** 63", "bigint")


@dataclass
class Batch:
    often: Job
    nul: Job
    beyond: Job
    short: list[Job]

    @property
    def all_ids(self) -> list[int]:
        return [self.often.pk, self.nul.pk, self.beyond.pk, *(job.pk for job in self.short)]

    @property
    def other_ids(self) -> list[int]:
        return [pk for pk in self.all_ids if pk != self.often.pk]


def enqueue_batch() -> Batch:
    # Priority 10: claimed in the worker's first pass, so it runs (and its row can be locked)
    # while the rest of the batch is still to run.
    often = progress_often.using(priority=10).enqueue(seconds=REPORT_SECONDS)
    nul = progress_message.enqueue(codepoint=0, length=500)  # "\x00" * 500
    beyond = progress_beyond_bigint.enqueue()
    short = progress_short.enqueue_many([((), {"sleep": SHORT_SLEEP})] * SHORT_JOBS)
    return Batch(often, nul, beyond, short)


class RowLock(threading.Thread):
    """Holds one job's row ``SELECT ... FOR UPDATE`` in an open transaction for ``seconds``,
    on its own connection, as a view calling ``select_for_update()`` would; then commits."""

    def __init__(self, job_id: int, seconds: float) -> None:
        super().__init__(name=f"row-lock-{job_id}", daemon=True)
        self.job_id = job_id
        self.seconds = seconds
        self.locked = threading.Event()
        self.released = threading.Event()
        self.stop = threading.Event()  # set at teardown: let go at once
        self.locked_at = 0.0  # wall clock, to compare with the task's
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with transaction.atomic():
                Job.objects.select_for_update().get(pk=self.job_id)
                self.locked_at = time.time()
                self.locked.set()
                # The deliberate hold: the row stays locked this long (not a wait for a state).
                self.stop.wait(self.seconds)
        except BaseException as exc:
            self.error = exc
        finally:
            self.released.set()
            self.locked.set()
            connections.close_all()  # this thread's connection


def job_summary(ids: list[int]) -> str:
    """The statuses, attempts and body runs of ``ids``: what a failure message shows."""
    jobs = list(Job.objects.filter(pk__in=ids).order_by("pk"))
    runs = Counter(LedgerEntry.objects.filter(job_id__in=ids).values_list("job_id", flat=True))
    by_status = Counter(job.status for job in jobs)
    unfinished = [
        f"{job.pk} {job.task_name.rsplit('.', 1)[-1]} {job.status} attempt {job.attempt}"
        for job in jobs
        if job.status != Status.SUCCEEDED
    ]
    twice = {pk: n for pk, n in runs.items() if n > 1}
    return (
        f"statuses {dict(by_status)}; not succeeded: {unfinished}; "
        f"bodies run more than once {twice}; never run {sorted(set(ids) - set(runs))}"
    )


def drain(start_worker: StartWorker, *, lock_seconds: float | None) -> list[str]:
    """Enqueue the batch and run one burst worker over it, locking the frequent reporter's row
    for ``lock_seconds`` once it runs (if given); return every expectation it missed."""
    batch = enqueue_batch()
    problems: list[str] = []
    worker = start_worker("--burst", "--concurrency", str(CONCURRENCY), name="burst")
    lock: RowLock | None = None
    locked_at = None
    try:
        if lock_seconds is not None:
            wait_for(
                lambda: Job.objects.filter(pk=batch.often.pk, status=Status.RUNNING).exists(),
                alive=[worker],
                timeout=30,
                message="the frequent reporter to run",
            )
            lock = RowLock(batch.often.pk, lock_seconds)
            lock.start()
            assert lock.locked.wait(10), "could not lock the frequent reporter's row"
            assert lock.error is None, f"locking the row failed: {lock.error!r}"

            def others_done_or_released() -> str | None:
                finished = Job.objects.filter(pk__in=batch.other_ids, status=Status.SUCCEEDED)
                if finished.count() == len(batch.other_ids):
                    return "done"
                return "released" if lock.released.is_set() else None

            try:
                seen = wait_for(
                    others_done_or_released,
                    alive=[worker],
                    timeout=lock_seconds + 10,
                    message="the other jobs to finish, or the lock to end",
                )
            except WorkerExited as exc:
                seen = f"worker exited: {exc}"
            if seen != "done":
                problems.append(
                    f"the other {len(batch.other_ids)} jobs did not all finish while the row "
                    f"was locked ({lock_seconds:.0f} s): {seen}; {job_summary(batch.other_ids)}"
                )
            lock.join(lock_seconds + 30)
            assert lock.error is None, f"the row lock failed: {lock.error!r}"
            locked_at = lock.locked_at

        # Bounded: the last body ends within REPORT_SECONDS of its start (or the lock's end).
        try:
            code = worker.wait(timeout=EXIT_TIMEOUT + REPORT_SECONDS)
        except AssertionError:
            problems.append(
                f"the burst worker did not exit within {EXIT_TIMEOUT + REPORT_SECONDS:.0f} s; "
                f"{job_summary(batch.all_ids)}"
            )
            worker.kill()  # the table as the hung worker left it is what is checked below
        else:
            if code != 0:
                problems.append(f"the burst worker exited with code {code}")
    finally:
        if lock is not None:
            lock.stop.set()
            lock.join(30)

    jobs = {job.pk: job for job in Job.objects.filter(pk__in=batch.all_ids)}
    not_once = [
        (pk, job.status, job.attempt)
        for pk, job in jobs.items()
        if (job.status, job.attempt) != (Status.SUCCEEDED, 1)
    ]
    if not_once:
        problems.append(f"{len(not_once)} jobs did not succeed on attempt 1: {not_once}")
    running = [pk for pk, job in jobs.items() if job.status == Status.RUNNING]
    if running:
        problems.append(f"{len(running)} jobs left running: {running}")
    runs = Counter(LedgerEntry.objects.values_list("job_id", "attempt"))
    expected_runs = Counter({(pk, 1): 1 for pk in batch.all_ids})
    if runs != expected_runs:
        extra = dict(runs - expected_runs)
        missing = dict(expected_runs - runs)
        problems.append(f"bodies run (job, attempt): extra {extra}, missing {missing}")

    nul = jobs[batch.nul.pk]
    if nul.progress_message != STORED_NUL_MESSAGE:
        problems.append(
            f"the NUL message was stored as {len(nul.progress_message)} characters "
            f"{nul.progress_message[:24]!r}..., expected 500 of {STORED_NUL_MESSAGE[:8]!r}"
        )

    beyond = jobs[batch.beyond.pk]
    refused = (beyond.result or {}).get("refused", {})
    if set(refused) != set(BEYOND_BIGINT):
        problems.append(f"the bigint job's result is {beyond.result!r}")
    for label, error in refused.items():
        if error is None:
            problems.append(f"set_progress({label}) was accepted, expected ValueError")
        elif not any(spelling in error for spelling in RANGE_SPELLINGS):
            problems.append(f"set_progress({label}) raised {error!r}, which names no range")
    largest = (beyond.progress_current, beyond.progress_total, beyond.progress_message)
    if largest != (LARGEST_BIGINT, LARGEST_BIGINT, "largest"):
        problems.append(f"the largest bigint report is stored as {largest}")

    often = jobs[batch.often.pk]
    reports, ended = (often.result or {}).get("reports"), (often.result or {}).get("ended")
    if locked_at is not None and (ended is None or ended <= locked_at):
        # Else the scenario did not happen: the body had stopped reporting before the lock.
        problems.append(f"the row was locked at {locked_at}, after the body ended at {ended}")
    last = (often.progress_current, often.progress_message)
    if reports is None or last != (reports, f"report {reports}"):
        problems.append(f"the frequent reporter made {reports} reports; stored is {last}")
    short_progress = Counter(
        Job.objects.filter(pk__in=[job.pk for job in batch.short]).values_list(
            "progress_current", "progress_message"
        )
    )
    if short_progress != Counter({(1, "done"): SHORT_JOBS}):
        problems.append(f"the short jobs' stored reports: {dict(short_progress)}")
    return problems


def test_bad_progress_reports_cost_no_outcome(start_worker: StartWorker) -> None:
    problems = drain(start_worker, lock_seconds=None)
    assert not problems, "\n".join(problems)


# PostgreSQL only: a row another session holds `FOR UPDATE` (and the worker's writes' 2 s
# lock_timeout) exists there only; SQLite has one database-wide write lock instead.
@pytest.mark.postgres_only
def test_a_row_locked_while_its_job_reports_progress_stalls_nothing(
    start_worker: StartWorker,
) -> None:
    problems = drain(start_worker, lock_seconds=HOLD_SECONDS)
    assert not problems, "\n".join(problems)
