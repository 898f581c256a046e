"""Jobs leased to this worker that it does not know it holds: given back after a lost connection.

A claim that commits but whose answer is lost with the connection (the server's reply never
arrives, the worker sees a connection error) leases its jobs to a worker that never learns of
them: their bodies never began, yet nothing renews their leases, and the reaper would take
them back only once those expire, a crash charged each. So once a worker's connection was lost,
its next pass asks which jobs the database says it holds and gives back, uncharged
(``budgets.py``: a claimed job that never began spends nothing), every one whose attempt its
ledger does not hold — at once, not a lease later.

Only the control thread claims, and it runs this between two of its passes, so no claim of
this worker is in flight while the ledger is read: a row leased to it that the ledger lacks
was claimed by an answer it never got. The release is fenced by the attempt, like every
worker write: a row reaped and claimed again by anyone since is not touched.
"""

from __future__ import annotations

import logging
from datetime import datetime

from ..db import Driver
from ..workflow import release
from .ledger import Ledger

logger = logging.getLogger("django_workqueue.worker")


def give_back_unheld(driver: Driver, owner: str, ledger: Ledger, since: datetime) -> bool:
    """Give back to ready, uncharged, the jobs leased to ``owner`` by claims made at
    ``since`` or later (this process's: the database's clock when it first connected) that
    ``ledger`` does not hold (one query, and one write if there are any); return whether none
    is left (a row another session holds locked is skipped, and tried again on the next
    call). A job an earlier process of the same worker id left running may have begun: it
    is the reaper's, which charges its crash."""
    leased = driver.leased_to(owner, since)
    if not leased:
        return True
    with ledger.lock:
        held = {(job_id, item.context.attempt) for job_id, item in ledger.running.items()}
    unheld = [outcome for outcome in leased if (outcome.job_id, outcome.attempt) not in held]
    if not unheld:
        return True
    # Through release.record, like every worker write: the row's workflow, signals and
    # counters learn of it in the same commit, and the queue is told the jobs are ready.
    recorded = release.record(driver, owner, unheld, skip_locked=True)
    for job_id, attempt in sorted(recorded.written):
        logger.warning(
            "job %s: attempt %s was claimed by worker %s in a claim whose answer was lost "
            "with its connection; given back to ready, uncharged (its body never began)",
            job_id, attempt, owner,
        )  # fmt: skip
    return not recorded.busy
