"""Claiming batch tasks' jobs together: ``@task(batch_size=100, batch_wait=0.5)``.

A batch task's jobs carry one item each and share the flow key ``batch:<task>`` (see
``flow.keys``), so the plain claim never takes them. Here a worker claims them per group — one
batch task in one of its queues — only together: ``batch_size`` of them, or fewer once the
oldest ready one became due (its ``run_after``) ``batch_wait`` seconds ago by the database's
clock. A batch costs the worker one slot, however many jobs it holds.

Each claimed job is leased like any other (running, attempt + 1, its own lease): it keeps its
own attempts, retries, priority and workflow; only the call is shared.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..db import ClaimedJob, Driver
from ..registry import registered_tasks
from .keys import flow_key

if TYPE_CHECKING:
    from ..decorator import Task


logger = logging.getLogger("django_workqueue.worker")

_SPARE = 0.001


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Group:
    """The ready jobs of one batch task in one queue: what one batch is claimed from."""

    queue: str
    task: Task[..., Any]

    @property
    def flow_key(self) -> str:
        key = flow_key(self.task.spec, (), {}, f"task {self.task.spec.name}")
        assert key is not None  # a batch task always has one
        return key


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClaimedBatches:
    """What ``claim_batches`` returns."""

    batches: list[tuple[Task[..., Any], list[ClaimedJob]]]
    """Each batch with its task, its jobs in claim order (priority DESC, run_after, id)."""
    due_in: float | None = None
    """Seconds until the next group it looked at and left filling becomes due (its batch_wait
    elapses); None if none is waiting. The worker sleeps no longer than this."""


def batch_groups(queues: Sequence[str]) -> list[Group]:
    """Every (queue, batch task registered in this process) a worker of ``queues`` claims from.

    Every served queue, not only the task's own: ``task.using(queue=...)`` moves its jobs."""
    # Filtered before sorting: every pass lists them, and most tasks are not batch tasks.
    batch_tasks = (
        (name, t) for name, t in registered_tasks().items() if t.spec.batch_size is not None
    )
    tasks = [task for _, task in sorted(batch_tasks, key=_name)]
    return [Group(queue=queue, task=task) for task in tasks for queue in queues]


def _name(item: tuple[str, Task[..., Any]]) -> str:
    return item[0]


def claim_batches(
    driver: Driver,
    queues: Sequence[str],
    slots: int,
    owner: str,
    now: datetime | None = None,
    groups: Sequence[Group] | None = None,
) -> ClaimedBatches:
    """Claim up to ``slots`` batches of the batch tasks of ``queues`` for ``owner``.

    A group with a full batch ready may give several; a group whose oldest job has waited out
    ``batch_wait`` gives what it has. The groups are visited from a random one on, so that
    when slots are scarce no batch task is always served last.
    """
    groups = list(batch_groups(queues) if groups is None else groups)
    batches: list[tuple[Task[..., Any], list[ClaimedJob]]] = []
    due_in: float | None = None
    if not groups or slots <= 0:
        return ClaimedBatches(batches=batches)
    keyed = [(group, group.flow_key) for group in groups]  # each key made once a pass
    # One read finds the groups worth a claim; an idle or filling group costs nothing more.
    backlog = driver.batch_backlog(
        [(group.queue, key, group.task.spec.batch_size or 1) for group, key in keyed], now
    )
    start = random.randrange(len(keyed))
    for group, key in keyed[start:] + keyed[:start]:
        spec = group.task.spec
        size = spec.batch_size or 1
        ready, waited = backlog.get((group.queue, key), (0, 0.0))
        if ready == 0:
            continue
        # Not due by this read (with a millisecond to spare for the float of `waited`): the
        # claim decides again, exactly, in its own statement.
        if ready < size and waited < spec.batch_wait - _SPARE:
            due_in = _earliest(due_in, spec.batch_wait - waited)
            continue
        while len(batches) < slots:
            try:
                claim = driver.claim_batch(group.queue, key, size, spec.batch_wait, owner, now)
            except Exception as exc:
                if not batches:
                    raise
                # The batches claimed so far are leased to us (each claim commits on its
                # own): hand them over rather than leave them to the reaper; the error comes
                # back to the worker with the next statement.
                logger.warning("claiming batches of %s failed (%s); running the %s claimed",
                               spec.name, exc, len(batches))  # fmt: skip
                return ClaimedBatches(batches=batches, due_in=due_in)
            if claim.jobs:
                batches.append((group.task, claim.jobs))
            elif claim.due_in is not None:  # another worker took part of it meanwhile
                due_in = _earliest(due_in, claim.due_in)
            if len(claim.jobs) < size:
                break  # the group is empty, filling, or gave its last partial batch
        if len(batches) >= slots:
            break
    return ClaimedBatches(batches=batches, due_in=due_in)


def _earliest(due_in: float | None, other: float) -> float:
    return other if due_in is None else min(due_in, other)
