"""Release: what a job's ending does to its dependents and its workflow, in the same transaction.

When a write finishes jobs (a worker's batch of outcomes, the reaper, ``complete_job``,
``cancel_job``…), the same transaction counts each ending on the job's waiting dependents
(``blocked`` or ``held``, ``prerequisites.py``; ``Driver.count_down``: one conditional UPDATE of
their counters, never a scan of the graph),
applies the verdict of each dependent's run condition (``conditions.verdict``: released, or
cancelled with a reason naming the prerequisite, which ends it in turn and is counted on its
own dependents), and updates the counters of every workflow touched. Nothing polls.

Lock order, the same in every transaction that finishes jobs (``locks.py``): the workflow
rows, in id order, then the finished jobs' rows, then their dependents' rows, level by level;
the counters last, on the workflow rows already held.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from django.db import transaction

from .. import signalling
from ..db import Driver, Ended, Outcome, Recorded
from ..outcomes import OutcomeKind
from ..states import Status
from ..stats import counters as stats_counters
from . import inbox
from .effects import UNMET_TYPE, Effects, error_time, finish, reopen
from .store import write_spawn

logger = logging.getLogger("django_workqueue.workflow")

__all__ = [
    "UNMET_TYPE", "Effects", "after_recorded", "error_time", "finish", "record", "reopen",
    "rows_only", "settle", "tell_written",
]  # fmt: skip


def record(
    driver: Driver,
    owner: str,
    outcomes: Sequence[Outcome],
    *,
    skip_locked: bool = False,
    savepoint: bool = True,
) -> Recorded:
    """Write ``outcomes`` (``Driver.record_many``) and, in the same transaction, what they
    do to workflows: children and continuations added at run time, dependents released.

    Inside a caller's transaction the write takes a savepoint, unless ``savepoint=False``
    (a worker's pass: an error ends the whole transaction, which the pass then rolls back)."""
    with transaction.atomic(using=driver.alias, savepoint=savepoint):
        recorded = driver.record_many(owner, outcomes, skip_locked=skip_locked)
        parked = [
            o.job_id for o in outcomes if o.waits and (o.job_id, o.attempt) in recorded.written
        ]
        if parked:  # a signal sent while the body was deciding to wait: see inbox.py
            inbox.wake_kept(driver.alias, parked)
        # Registered first: the jobs' own signals come before those of what they released.
        tell_written(driver.alias, owner, outcomes, recorded)
        after_recorded(driver.alias, outcomes, recorded)
        stats_counters.count(driver, owner, outcomes, recorded)  # one statement a batch
        _announce_returns(driver, outcomes, recorded)
    return recorded


def tell_written(alias: str, owner: str, outcomes: Sequence[Outcome], recorded: Recorded) -> None:
    """What this process hears of a worker's outcomes just written, once their write commits:
    the signal of the status each row took (``signalling.outcomes_written``), then the
    statistics listeners (``stats_counters.tell``); nothing of an outcome the fence refused.
    ``record`` calls it inside its transaction; a pass written in one autocommitted statement
    (``Driver.record_and_claim``) calls it once the statement returned, so both tell alike."""
    signalling.outcomes_written(alias, owner, outcomes, recorded)
    stats_counters.tell(alias, outcomes, recorded)


# Outcomes that put their job back in line: ready again (released at shutdown) or scheduled
# for later (a retry's backoff, a snooze).
_RETURNING = frozenset({OutcomeKind.RETRY, OutcomeKind.SNOOZE, OutcomeKind.RELEASE})

# Endings whose write, for a job outside any workflow, is its row and its statistics alone.
_ROWS_ONLY = frozenset({OutcomeKind.SUCCEEDED, OutcomeKind.DISCARD, OutcomeKind.CANCELLED})


def rows_only(outcomes: Sequence[Outcome]) -> bool:
    """Whether ``record`` would write nothing for ``outcomes`` but their rows and their
    statistics, given that their jobs are outside workflows (which only the rows can say:
    ``Driver.record_and_claim`` leaves a row that joined one for this function's caller to
    write through ``record``): endings only (no job put back in line: its queue's NOTIFY),
    no wait (the inbox), no spawn. It asks about the outcomes alone: who listens
    (``tell_written``: the signal receivers, the statistics listeners) is told the same
    after either write. Whatever ``record`` comes to do, this function says whether it may
    be skipped."""
    return all(o.kind in _ROWS_ONLY and not o.waits and o.spawn is None for o in outcomes)


def _announce_returns(driver: Driver, outcomes: Sequence[Outcome], recorded: Recorded) -> None:
    """NOTIFY the queues of jobs that went back in line: idle workers poll rarely while they
    listen, and the fleet's maintainer sleeps until the earliest scheduled job it knows of, so a
    released job is claimed at once and a retry is promoted on time (one statement, only in a
    batch that has such outcomes; a failure whose attempts are spent wakes its queue for
    nothing)."""
    queues = {
        outcome.queue
        for outcome in outcomes
        if outcome.kind in _RETURNING
        and outcome.queue
        and (outcome.job_id, outcome.attempt) in recorded.written
    }
    if queues:  # other processes; in this one, the writing worker's next pass claims
        driver.notify(queues)


def after_recorded(alias: str, outcomes: Sequence[Outcome], recorded: Recorded) -> None:
    """The workflow effects of outcomes just written (inside the writing transaction)."""
    ended = recorded.ended
    spawning = [
        o for o in outcomes if o.spawn is not None and (o.job_id, o.attempt) in recorded.written
    ]
    if not spawning and not any(e.workflow_id is not None for e in ended):
        return  # plain jobs: no statement more than the write
    effects = Effects(alias)
    if spawning:
        by_id = {e.id: e for e in ended}
        for outcome in spawning:
            parent = by_id.get(outcome.job_id)
            if parent is not None and parent.status == Status.SUCCEEDED:
                by_id[parent.id] = write_spawn(alias, parent, outcome.spawn, effects)
        ended = list(by_id.values())
    effects.ended(ended)
    effects.apply()


def settle(alias: str, ended: Iterable[Ended]) -> None:
    """Count jobs that just ended (outside a worker's write) on their dependents and
    workflows, in the caller's transaction."""
    ended = list(ended)
    signalling.jobs_ended(alias, ended)
    effects = Effects(alias)
    effects.ended(ended)
    effects.apply()
