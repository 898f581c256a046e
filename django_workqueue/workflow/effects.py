"""The workflow effects of one transaction: prerequisites counted down, dependents released or
cancelled by their run condition, workflow counters, outputs and endings, gathered and then
applied in lock order (``Effects``). ``release.py`` and ``store.py`` fill them.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Case, ExpressionWrapper, F, IntegerField, Value, When
from django.db.models.functions import Now
from django.utils import timezone

from .. import signalling, wakeup
from ..db import Ended, driver_for
from ..exceptions import DependencyFailed
from ..models import Dependency, Job, Workflow
from ..states import RunCondition, Status, WorkflowStatus, transition
from . import conditions

logger = logging.getLogger("django_workqueue.workflow")

UNMET_TYPE = f"{DependencyFailed.__module__}.{DependencyFailed.__qualname__}"


@dataclasses.dataclass(slots=True)
class _Tally:
    opened: int = 0
    ended: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    output: Any = None
    replaced: dict[int, int] = dataclasses.field(default_factory=dict)


class Effects:
    """The workflow effects of one transaction, gathered and then applied in lock order."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.driver = driver_for(alias)
        self.workflows: dict[int, _Tally] = {}
        self.queues: set[str] = set()
        self._pending: list[Ended] = []
        self._edges: list[tuple[int, int]] = []
        self._status: dict[int, str] = {}

    def workflow(self, workflow_id: int) -> _Tally:
        return self.workflows.setdefault(workflow_id, _Tally())

    def ended(self, jobs: Iterable[Ended]) -> None:
        """Jobs that just ended: count them in their workflows and on their dependents."""
        self._pending += [job for job in jobs if job.workflow_id is not None]

    def count(self, edges: Iterable[tuple[int, int]], status: dict[int, str]) -> None:
        """Count the endings of prerequisites that had ended before these edges (dependent,
        prerequisite) were written (a new job naming a finished job in depends_on)."""
        self._edges += list(edges)
        self._status.update(status)

    def apply(self) -> None:
        edges, status = self._edges, dict(self._status)
        while self._pending or edges:
            pending, self._pending = self._pending, []
            for job in pending:
                self.workflow(job.workflow_id).ended[job.status] += 1  # type: ignore[arg-type]
                status[job.id] = job.status
            if pending:
                edges = edges + list(
                    Dependency.objects.using(self.alias)
                    .filter(prerequisite_id__in=[job.id for job in pending])
                    .values_list("job_id", "prerequisite_id")
                )
            self._pending = self._count_down(edges, status)
            edges, status = [], {}
        self._edges, self._status = [], {}
        self._update_workflows()
        if self.queues:
            queues = tuple(sorted(self.queues))
            self.driver.notify(queues)
            transaction.on_commit(functools.partial(wakeup.wake, queues), using=self.alias)

    def _count_down(self, edges: list[tuple[int, int]], status: dict[int, str]) -> list[Ended]:
        """Count each prerequisite's ending on its dependents; release or cancel those whose
        run condition is decided; return the cancelled ones (they ended too)."""
        if not edges:
            return []
        counts: dict[int, list[Any]] = {}  # dependent: [ended, succeeded, first unmet]
        for dependent, prerequisite in edges:
            entry = counts.setdefault(dependent, [0, 0, None])
            entry[0] += 1
            if status[prerequisite] == Status.SUCCEEDED:
                entry[1] += 1
            elif entry[2] is None:
                entry[2] = prerequisite
        rows = self.driver.count_down(sorted((d, n, ok) for d, (n, ok, _) in counts.items()))
        ready: list[int] = []
        scheduled: list[int] = []
        unmet: dict[int, tuple[Any, int | None]] = {}
        for row in rows:
            if row.held:  # counted like a blocked one; its release decides (operations/holds.py)
                continue
            culprit = counts[row.id][2]
            verdict = conditions.verdict(
                row.run_condition, row.waiting_on, row.prerequisites_succeeded, culprit is not None
            )
            if verdict == conditions.Verdict.RELEASE:
                (ready if row.due else scheduled).append(row.id)
                if row.due:
                    self.queues.add(row.queue)
            elif verdict == conditions.Verdict.CANCEL:
                unmet[row.id] = (row, culprit)
        jobs = Job.objects.using(self.alias)
        for ids, target in ((ready, Status.READY), (scheduled, Status.SCHEDULED)):
            if ids:
                (to,) = transition(Status.BLOCKED, target)
                jobs.filter(id__in=ids, status=Status.BLOCKED).update(status=to)
        return self._cancel_unmet(unmet, status) if unmet else []

    def _cancel_unmet(
        self, unmet: dict[int, tuple[Any, int | None]], status: dict[int, str]
    ) -> list[Ended]:
        """End dependents whose run condition can no longer be met, each with an error entry
        naming the prerequisite."""
        (cancelled,) = transition(Status.BLOCKED, Status.CANCELLED)
        jobs = Job.objects.using(self.alias)
        culprits = {c for _, c in unmet.values() if c is not None}
        names = dict(jobs.filter(id__in=culprits).values_list("id", "task_name"))
        at = error_time()
        changed = []
        for job in jobs.filter(id__in=list(unmet), status=Status.BLOCKED).only("id", "errors"):
            row, culprit = unmet[job.pk]
            job.errors = [*job.errors, _unmet_entry(row, culprit, names, status, at)]
            job.status = cancelled
            changed.append(job)
        Job.objects.using(self.alias).bulk_update(changed, ["errors", "status"])
        jobs.filter(id__in=[job.pk for job in changed]).update(finished_at=Now())
        ended = [Ended(job.pk, cancelled, unmet[job.pk][0].workflow_id) for job in changed]
        signalling.jobs_ended(self.alias, ended)
        return ended

    def _update_workflows(self) -> None:
        if not self.workflows:
            return
        workflows = Workflow.objects.using(self.alias)
        ids = sorted(self.workflows)

        def per_workflow(field: str, change: Any) -> Case:
            whens = [
                When(pk=pk, then=ExpressionWrapper(F(field) + change(t), IntegerField()))
                for pk, t in self.workflows.items()
            ]
            return Case(*whens, default=F(field), output_field=IntegerField())

        workflows.filter(pk__in=ids).update(
            total=per_workflow("total", lambda t: t.opened),
            open=per_workflow("open", lambda t: t.opened - sum(t.ended.values())),
            succeeded=per_workflow("succeeded", lambda t: t.ended[Status.SUCCEEDED]),
            failed=per_workflow("failed", lambda t: t.ended[Status.FAILED]),
            cancelled=per_workflow("cancelled", lambda t: t.ended[Status.CANCELLED]),
        )
        for pk, tally in self.workflows.items():
            if tally.output is not None or tally.replaced:
                _set_output(workflows, pk, tally)
        grown = [pk for pk, tally in self.workflows.items() if tally.opened]
        if grown:
            # A job joined a finished workflow (it named one of its jobs in depends_on): the
            # workflow runs again, or, if the job ended at once, finishes anew just below.
            workflows.filter(pk__in=grown, finished_at__isnull=False).update(
                status=WorkflowStatus.RUNNING, finished_at=None, result=None
            )
        finished = workflows.filter(pk__in=ids, open=0, finished_at__isnull=True)
        for workflow in finished.only("id", "failed", "cancelled", "output"):
            finish(self.alias, workflow)


def error_time() -> str:
    """The ``at`` of an error entry written outside a driver's statement, in the drivers'
    format (UTC, milliseconds, "Z")."""
    return timezone.now().strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _set_output(workflows: Any, pk: int, tally: _Tally) -> None:
    output = tally.output
    if output is None:
        output = workflows.filter(pk=pk).values_list("output", flat=True).first()
    for old, new in tally.replaced.items():
        output = _replace(output, old, new)
    workflows.filter(pk=pk).update(output=output)


def _replace(shape: Any, old: int, new: int) -> Any:
    if isinstance(shape, list):
        return [_replace(part, old, new) for part in shape]
    return new if shape == old else shape


def finish(alias: str, workflow: Workflow) -> None:
    """Set a workflow's status, result and finished_at (its last job just ended)."""
    if workflow.failed:
        status = WorkflowStatus.FAILED
    elif workflow.cancelled:
        status = WorkflowStatus.CANCELLED
    else:
        status = WorkflowStatus.SUCCEEDED
    ids = list(_leaves(workflow.output))
    results = dict(
        Job.objects.using(alias).filter(id__in=ids).values_list("id", "result") if ids else []
    )
    if (
        Workflow.objects.using(alias)
        .filter(pk=workflow.pk, open=0)
        .update(status=status, result=_shaped(workflow.output, results), finished_at=Now())
    ):
        signalling.workflow_ended(alias, workflow.pk, status)


def _leaves(shape: Any) -> Iterable[int]:
    if isinstance(shape, list):
        for part in shape:
            yield from _leaves(part)
    elif shape is not None:
        yield shape


def _shaped(shape: Any, results: dict[int, Any]) -> Any:
    if isinstance(shape, list):
        return [_shaped(part, results) for part in shape]
    return None if shape is None else results.get(shape)


def _unmet_entry(
    row: Any, culprit: int | None, names: dict[int, str], status: dict[int, str], at: str
) -> dict[str, Any]:
    condition = RunCondition(row.run_condition)
    if culprit is not None and condition == RunCondition.ALL_SUCCEEDED:
        message = (
            f"prerequisite job {culprit} ({names.get(culprit, '?')}) ended {status[culprit]}; "
            f"this job runs only if all its prerequisites succeed (run_if='all_succeeded')"
        )
    else:
        message = (
            "none of its prerequisites succeeded; this job runs only if at least one does "
            "(run_if='any_succeeded')"
        )
    return {
        "attempt": 0, "at": at, "type": UNMET_TYPE, "message": message, "traceback": None,
        "prerequisite": culprit,
    }  # fmt: skip


def reopen(alias: str, counts: dict[int, collections.Counter[str]]) -> None:
    """Jobs of these workflows left a terminal status (redrive, resumption): count them open
    again and mark their workflows running. ``counts``: workflow -> status left -> jobs."""
    workflows = Workflow.objects.using(alias)
    for pk in sorted(counts):
        left = counts[pk]
        workflows.filter(pk=pk).update(
            open=F("open") + sum(left.values()),
            succeeded=F("succeeded") - left[Status.SUCCEEDED],
            failed=F("failed") - left[Status.FAILED],
            cancelled=F("cancelled") - left[Status.CANCELLED],
            status=Value(WorkflowStatus.RUNNING),
            finished_at=None,
            result=None,
        )
