"""The mutations of ``manage.py workqueue``: each goes through ``django_workqueue.operations``
(or retention's ``purge``), job by job for the ids an operator names, in batches of
``operations.jobs.BATCH_SIZE`` for a filter; a dry run reads what would change and writes
nothing. Every change (not a dry run) is audited: ``audit_target`` says what it targeted."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any

from .. import operations
from ..maintenance import retention
from ..models import Job, Queue
from ..operations.jobs import BATCH_SIZE, batches
from ..operations.queues import check_queue
from ..states import ACTIVE, Status
from .selection import Filters

Advance = Callable[[int], None]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """A mutation of jobs: the statuses it applies to, and the operation that does it."""

    name: str
    applies_to: tuple[str, ...]
    one: Callable[[int, str], operations.OperationResult]
    many: Callable[[list[int], str], operations.OperationResult] | None = None
    """One call for a batch of ids, when the operation takes sets of jobs."""


def actions(attempts: int | None = None) -> dict[str, Action]:
    """The job mutations by subcommand; ``attempts`` is redrive's fresh attempt budget."""

    def redrive(ids: Sequence[int], alias: str) -> operations.OperationResult:
        return operations.redrive(list(ids), alias=alias, attempts=attempts)

    return {
        "cancel": Action(
            name="cancel", applies_to=tuple(ACTIVE),
            one=lambda pk, alias: operations.cancel_job(pk, alias=alias),
            many=lambda ids, alias: operations.cancel_jobs(ids, alias=alias),
        ),
        "retry": Action(
            name="retry", applies_to=(Status.FAILED, Status.SCHEDULED),
            one=lambda pk, alias: operations.retry_job(pk, alias=alias),
        ),
        "redrive": Action(
            name="redrive", applies_to=(Status.FAILED,),
            one=lambda pk, alias: redrive([pk], alias), many=redrive,
        ),
        "hold": Action(
            name="hold", applies_to=(Status.BLOCKED, Status.SCHEDULED, Status.READY),
            one=lambda pk, alias: operations.hold_job(pk, alias=alias),
        ),
        "release": Action(
            name="release", applies_to=(Status.HELD,),
            one=lambda pk, alias: operations.release_job(pk, alias=alias),
        ),
    }  # fmt: skip


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    """What a mutation did, or would do (``dry_run``): the ``--json`` output."""

    action: str
    dry_run: bool
    matched: int
    """Jobs (or queues) the action applies to."""
    changed: int
    messages: list[str]
    missing: list[Any] = dataclasses.field(default_factory=list)
    """Ids (or queue names) that do not exist."""
    ids: list[int] = dataclasses.field(default_factory=list)
    """For a dry run, the ids it would change (the first ``BATCH_SIZE``)."""

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def on_ids(action: Action, ids: Iterable[int], alias: str, *, dry_run: bool) -> Report:
    """The action on each job named by id, with the operation's own message for each."""
    ids = list(dict.fromkeys(ids))
    statuses = dict(Job.objects.using(alias).filter(pk__in=ids).values_list("pk", "status"))
    missing = [pk for pk in ids if pk not in statuses]
    messages = [f"there is no job {pk}" for pk in missing]
    applicable = [pk for pk in ids if statuses.get(pk) in action.applies_to]
    changed = 0
    for pk in ids:
        if pk in missing:
            continue
        if dry_run:
            if pk in applicable:
                messages.append(f"would {action.name} job {pk} ({statuses[pk]})")
            else:
                messages.append(f"job {pk} is {statuses[pk]}; {action.name} would not change it")
            continue
        try:
            result = action.one(pk, alias)
        except Job.DoesNotExist as exc:  # deleted meanwhile
            missing.append(pk)
            messages.append(str(exc))
            continue
        changed += result.count
        messages.append(result.message)
    return Report(
        action=action.name, dry_run=dry_run, matched=len(applicable), changed=changed,
        messages=messages, missing=missing, ids=applicable if dry_run else [],
    )  # fmt: skip


def on_filter(
    action: Action, filters: Filters, alias: str, *, dry_run: bool, advance: Advance | None = None
) -> Report:
    """The action on every job the filters select that it applies to, a batch at a time."""
    selection = filters.apply(Job.objects.using(alias)).filter(status__in=action.applies_to)
    matched = selection.count()
    if dry_run:
        ids = list(selection.order_by("pk").values_list("pk", flat=True)[:BATCH_SIZE])
        message = f"would {action.name} {matched} job(s)"
        return Report(
            action=action.name, dry_run=True, matched=matched, changed=0, messages=[message],
            ids=ids,
        )  # fmt: skip
    changed = 0
    messages: list[str] = []
    for batch in batches(selection):
        ids = [pk for (pk,) in batch]
        if action.many is not None:
            results = [action.many(ids, alias)]
        else:
            results = [_one_or_gone(action, pk, alias) for pk in ids]
        for result in results:
            changed += result.count
            if action.many is not None:
                messages.append(result.message)
        if advance:
            advance(len(ids))
    if action.many is None or len(messages) > 1:  # one line, not one per batch
        messages = [f"{action.name}: {changed} of {matched} job(s) changed"]
    return Report(
        action=action.name, dry_run=False, matched=matched, changed=changed, messages=messages
    )


def _one_or_gone(action: Action, pk: int, alias: str) -> operations.OperationResult:
    try:
        return action.one(pk, alias)
    except Job.DoesNotExist:  # deleted since the batch was read
        return operations.OperationResult(action="unchanged", count=0, message="")


def on_queues(verb: str, names: Sequence[str], alias: str, *, dry_run: bool) -> Report:
    """``pause`` or ``resume`` queues (``operations.pause_queue`` / ``resume_queue``)."""
    operation = operations.pause_queue if verb == "pause" else operations.resume_queue
    paused = set(
        Queue.objects.using(alias).filter(paused_at__isnull=False).values_list("name", flat=True)
    )
    messages: list[str] = []
    changed = matched = 0
    for name in dict.fromkeys(names):
        if dry_run:
            check_queue(name)  # as the operation does: an unknown queue is an error either way
            applies = (name not in paused) if verb == "pause" else (name in paused)
            matched += applies
            state = "paused" if name in paused else "not paused"
            messages.append(
                f"would {verb} queue {name}" if applies else f"queue {name} is {state} already"
            )
            continue
        result = operation(name, alias=alias)
        matched += 1
        changed += result.count
        messages.append(result.message)
    return Report(action=verb, dry_run=dry_run, matched=matched, changed=changed, messages=messages)


def purge_policy(statuses: Sequence[str], older_than: timedelta | None) -> retention.Policy:
    """``WORKQUEUE["RETENTION"]``, or ``older_than`` for every status; only ``statuses`` when
    given (the others are kept)."""
    policy = retention.Policy.from_settings()
    ages: dict[str, timedelta | None] = {
        status: older_than if older_than is not None else getattr(policy, status)
        for status in retention.STATUSES
    }
    if statuses:
        ages = {status: age if status in statuses else None for status, age in ages.items()}
    return retention.Policy(**ages)


def purge(
    policy: retention.Policy, alias: str, *, dry_run: bool, advance: Advance | None = None
) -> dict[str, Any]:
    """Retention on demand; returns what was (or would be) deleted."""
    if dry_run:
        found = retention.pending(alias=alias, policy=policy)
    else:
        found = retention.purge(alias=alias, policy=policy, on_batch=advance)
    return {
        "action": "purge", "dry_run": dry_run, "jobs": found.jobs, "total": found.total,
        "workflows": found.workflows,
        "retention_days": {
            status: None if age is None else age.total_seconds() / 86400
            for status, age in dataclasses.asdict(policy).items()
        },
    }  # fmt: skip


def purge_total(policy: retention.Policy, alias: str) -> int:
    """How many jobs a purge would delete (the progress bar's total)."""
    return retention.pending(alias=alias, policy=policy).total


def on_filter_total(action: Action, filters: Filters, alias: str) -> int:
    """How many jobs ``on_filter`` will go through (the progress bar's total)."""
    return filters.apply(Job.objects.using(alias)).filter(status__in=action.applies_to).count()


def audit_target(
    ids: Sequence[int] = (), filters: Filters | None = None, *, everything: bool = False
) -> dict[str, Any]:
    """What a job mutation targeted, for its audit record: the ids, or the filter."""
    if ids:
        return {"ids": list(dict.fromkeys(ids))}
    chosen: dict[str, Any] = {}
    if filters is not None:
        chosen = {
            "queue": list(filters.queues), "task": list(filters.tasks),
            "status": list(filters.statuses), "error_type": list(filters.error_types),
            "error": filters.error,
            "older_than_seconds": (
                None if filters.older_than is None else filters.older_than.total_seconds()
            ),
        }  # fmt: skip
    target: dict[str, Any] = {"filter": {key: value for key, value in chosen.items() if value}}
    if everything:
        target["all"] = True
    return target
