"""Writing workflows: a compiled graph becomes jobs, dependency edges and counters.

Everything is written in one transaction on the jobs database, joining the caller's: a
workflow exists if and only if the caller's transaction commits, like a single job. Jobs of the
same task and options are inserted together (one statement each); the edges in one more.

A job may name existing jobs as prerequisites (``using(depends_on=[...])``). Those rows are
locked first (after their workflows' rows: the lock order of ``locks.py``), so that none of
them can end between being read and being counted: one that has already ended is counted at
once (the new job may be released, or cancelled, in the same transaction); one still open and
in no workflow joins the new job's workflow, so that its ending is counted like any step's.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import F, Max

from .. import signalling
from ..conf import workqueue_settings as conf
from ..db import Ended, driver_for
from ..exceptions import InvalidOption
from ..models import Dependency, Job, Workflow
from ..states import ACTIVE, AWAITING_PREREQUISITES, TERMINAL, Status
from .effects import Effects
from .graph import Graph, output_ids
from .locks import lock_jobs, lock_workflows

if TYPE_CHECKING:
    from ..decorator import Task
    from .canvas import Composition, Step

logger = logging.getLogger("django_workqueue.workflow")


def write_workflow(step: Composition, *, name: str) -> Workflow:
    """Compile and write ``step`` as a new workflow; return it."""
    graph = Graph()
    _, value = graph.add(step, [], None, "workflow")  # validates every step: nothing written
    alias = conf.DATABASE
    workflow = Workflow(name=name[:200])
    if _deferred(alias):
        # The caller's transaction is on another database: write when (and if) it commits.
        transaction.on_commit(
            functools.partial(_write_workflow, alias, graph, value, workflow), DEFAULT_DB_ALIAS
        )
        return workflow
    return _write_workflow(alias, graph, value, workflow)


def _write_workflow(alias: str, graph: Graph, value: Any, workflow: Workflow) -> Workflow:
    with transaction.atomic(using=alias):
        workflow.save(using=alias)
        effects = Effects(alias)
        ids = write_nodes(alias, graph, workflow.pk, effects)
        effects.workflow(workflow.pk).output = output_ids(value, ids)
        effects.apply()
    workflow.refresh_from_db(using=alias)
    return workflow


def enqueue_with_dependencies(task: Task[..., Any], args: Any, kwargs: Any) -> Job:
    """``task.using(depends_on=[...]).enqueue(...)``: one job that waits for existing jobs. It
    joins the workflow of its first prerequisite that has one, or starts one."""
    graph = Graph()
    graph.add_call(task, args, kwargs, [], None, task.name)
    alias = conf.DATABASE
    if _deferred(alias):  # written when (and if) the caller's transaction commits
        job = Job(task_name=task.name, status=Status.BLOCKED)
        job.duplicate = False  # type: ignore[attr-defined]

        def write() -> None:
            written = _write_dependent(alias, graph)
            job.__dict__.update(written.__dict__)

        transaction.on_commit(write, DEFAULT_DB_ALIAS)
        return job
    return _write_dependent(alias, graph)


def _deferred(alias: str) -> bool:
    """Whether the caller writes inside a transaction of another database than the jobs'."""
    return alias != DEFAULT_DB_ALIAS and connections[DEFAULT_DB_ALIAS].in_atomic_block


def enqueue_many_with_dependencies(task: Task[..., Any], calls: list[tuple[Any, Any]]) -> list[Job]:
    """``task.using(depends_on=[...]).enqueue_many(...)``: each job waits for the same jobs and
    joins the same workflow, as ``enqueue`` would."""
    graph = Graph()
    for index, (args, kwargs) in enumerate(calls):
        graph.add_call(task, args, kwargs, [], None, f"{task.name} item {index}")
    if not graph.nodes:
        return []
    alias = conf.DATABASE
    if _deferred(alias):
        raise InvalidOption(
            f"{task.name}.using(depends_on=...).enqueue_many() inside a transaction of another "
            f"database than the jobs database cannot be deferred to its commit; enqueue the jobs "
            f"one by one, or after the commit"
        )
    ids = _write_dependents(alias, graph)
    jobs = {job.pk: job for job in Job.objects.using(alias).filter(pk__in=ids)}
    for job in jobs.values():
        job.duplicate = False  # type: ignore[attr-defined]
    return [jobs[pk] for pk in ids]


def _write_dependent(alias: str, graph: Graph) -> Job:
    job = Job.objects.using(alias).get(pk=_write_dependents(alias, graph)[0])
    job.duplicate = False  # type: ignore[attr-defined]
    return job


def _write_dependents(alias: str, graph: Graph) -> list[int]:
    """Write jobs that wait for existing jobs into the workflow of the first prerequisite that
    has one (a finished workflow runs again; a cancelled one is never joined), or into a new
    workflow."""
    with transaction.atomic(using=alias):
        external = list(dict.fromkeys(pk for node in graph.nodes for pk in node.external))
        # The prerequisites' workflows' rows, then theirs (the lock order, locks.py): a
        # cancelled workflow stays cancelled, and a job naming one of its jobs starts its own.
        cancelled, rows = lock_jobs(Job.objects.using(alias).filter(id__in=external))
        joined = dict(rows)
        workflow_id = next(
            (joined[pk] for pk in external if joined.get(pk) not in (None, *cancelled)), None
        )
        effects = Effects(alias)
        if workflow_id is None:
            name = graph.nodes[0].template.task_name
            workflow_id = Workflow.objects.using(alias).create(name=name).pk
            ids = write_nodes(alias, graph, workflow_id, effects)
            effects.workflow(workflow_id).output = ids[0] if len(ids) == 1 else ids
        else:
            ids = write_nodes(alias, graph, workflow_id, effects)
        effects.apply()
    return ids


def write_nodes(alias: str, graph: Graph, workflow_id: int, effects: Effects) -> list[int]:
    """Insert the graph's jobs into ``workflow_id`` and their edges; return the job ids, one
    per node. Counters and releases are left to ``effects``."""
    driver = driver_for(alias)
    nodes = graph.nodes
    external = list(dict.fromkeys(pk for node in nodes for pk in node.external))
    states = _lock_prerequisites(alias, external, workflow_id, effects)
    ids: list[int] = [0] * len(nodes)
    batches: dict[Any, list[int]] = {}
    for index, node in enumerate(nodes):
        # Steps differing in their flow key alone share an insert, each with its own key.
        template = dataclasses.replace(node.template, workflow_id=workflow_id, flow_keys=None)
        batches.setdefault(template, []).append(index)
    for template, indexes in batches.items():
        payloads = [(nodes[i].call.args_json, nodes[i].call.kwargs_json) for i in indexes]
        flows = [nodes[i].template.flow_keys for i in indexes]
        if any(flows):
            keys = tuple(None if own is None else own[0] for own in flows)
            template = dataclasses.replace(template, flow_keys=keys)
        inserted = driver.insert(template, payloads)
        signalling.enqueued(alias, template.task_name, template.queue, inserted.ids)
        for index, pk in zip(indexes, inserted.ids, strict=True):
            ids[index] = pk
        if template.waiting_on == 0:
            effects.queues.add(template.queue)
    edges = []
    finished: list[tuple[int, int]] = []
    for index, node in enumerate(nodes):
        prerequisites = [ids[p] for p in node.prerequisites] + node.external
        for position, prerequisite in enumerate(prerequisites):
            edges.append(Dependency(job_id=ids[index], prerequisite_id=prerequisite,
                                    position=position))  # fmt: skip
            if states.get(prerequisite, Status.READY) in TERMINAL:
                finished.append((ids[index], prerequisite))
    Dependency.objects.using(alias).bulk_create(edges)
    effects.workflow(workflow_id).opened += len(nodes)
    effects.count(finished, {pk: status for pk, status in states.items() if status in TERMINAL})
    return ids


def _lock_prerequisites(
    alias: str, external: list[int], workflow_id: int, effects: Effects
) -> dict[int, str]:
    """Lock the existing prerequisites; those open and in no workflow join ``workflow_id``.
    Returns {id: status}."""
    if not external:
        return {}
    rows = (
        Job.objects.using(alias)
        .select_for_update()
        .filter(id__in=external)
        .order_by("id")
        .values_list("id", "status", "workflow_id")
    )
    states: dict[int, str] = {}
    adopt: list[int] = []
    for pk, status, current in rows:
        states[pk] = status
        if current is None and status in ACTIVE:
            adopt.append(pk)
    missing = [pk for pk in external if pk not in states]
    if missing:
        raise InvalidOption(
            f"depends_on names job(s) {', '.join(map(str, missing))}, which do not exist "
            f"(deleted, or never committed)"
        )
    if adopt:
        Job.objects.using(alias).filter(id__in=adopt).update(workflow_id=workflow_id)
        effects.workflow(workflow_id).opened += len(adopt)
    return states


@dataclasses.dataclass(slots=True)
class Spawn:
    """What a running job added (``context.add``) and chose to continue with
    (``context.continue_with``), compiled; written with the job's success."""

    graph: Graph = dataclasses.field(default_factory=Graph)
    children: list[int] = dataclasses.field(default_factory=list)
    """Last nodes of the added steps: the parent's dependents wait for them too."""
    continuation: int | None = None
    """The continuation's last node: the parent's dependents wait for it instead, and it
    stands for the parent's value (a chain's next step receives its result)."""

    def add(self, step: Step) -> None:
        if self.continuation is not None:
            raise InvalidOption(
                "context.add() after context.continue_with(): add every step first; the "
                "continuation waits for them"
            )
        sinks, _ = self.graph.add(step, [], None, f"context.add() #{len(self.children)}")
        self.children += sinks

    def continue_with(self, step: Step) -> None:
        if self.continuation is not None:
            raise InvalidOption("context.continue_with() was already called in this attempt")
        sinks, _ = self.graph.add(step, list(self.children), None, "context.continue_with()")
        if len(sinks) != 1:
            raise InvalidOption(
                "context.continue_with() needs a step that ends in one job (a signature, or a "
                "chain whose last step is one); end a group with a callback: "
                "group(...).then(merge.s())"
            )
        self.continuation = sinks[0]


def write_spawn(alias: str, parent: Ended, spawn: Spawn, effects: Effects) -> Ended:
    """Write what ``parent`` added at run time, in the transaction recording its success."""
    workflows = Workflow.objects.using(alias)
    workflow_id = parent.workflow_id
    if workflow_id is None:  # a lone job fanning out starts a workflow, which it joins
        name = Job.objects.using(alias).filter(pk=parent.id).values_list("task_name", flat=True)
        workflow_id = workflows.create(name=(name.first() or "")[:200]).pk
        Job.objects.using(alias).filter(pk=parent.id).update(workflow_id=workflow_id)
        effects.workflow(workflow_id).opened += 1
        effects.workflow(workflow_id).output = parent.id
    else:
        # The workflow's row (a worker's write holds it already), then the dependents' rows
        # (they will wait for the children): the lock order of locks.py, which a sibling
        # prerequisite's ending follows too.
        if lock_workflows(alias, [workflow_id]):  # cancelled: see locks.py
            logger.info(
                "job %s: its workflow %s was cancelled; the steps it added were not written",
                parent.id, workflow_id,
            )  # fmt: skip
            return Ended(parent.id, parent.status, workflow_id)
        if spawn.children:
            dependents = Dependency.objects.using(alias).filter(prerequisite_id=parent.id)
            locked = Job.objects.using(alias).select_for_update().order_by("id")
            list(locked.filter(id__in=dependents.values("job_id")).values_list("id"))
    ids = write_nodes(alias, spawn.graph, workflow_id, effects)
    edges = Dependency.objects.using(alias).filter(prerequisite_id=parent.id)
    if spawn.continuation is not None:
        continuation = ids[spawn.continuation]
        edges.update(prerequisite_id=continuation)  # dependents now wait for it instead
        effects.workflow(workflow_id).replaced[parent.id] = continuation
    elif spawn.children:
        _wait_for_children(alias, edges, [ids[i] for i in spawn.children])
    return Ended(parent.id, parent.status, workflow_id)


def _wait_for_children(alias: str, edges: Any, children: list[int]) -> None:
    """The parent's dependents wait for its children too (new edges after their own)."""
    last = dict(
        Dependency.objects.using(alias)
        .filter(job_id__in=edges.values("job_id"))
        .values("job_id")
        .annotate(last=Max("position"))
        .values_list("job_id", "last")
    )
    if not last:
        return
    jobs = Job.objects.using(alias)
    # A held dependent waits for the children too: its release recounts from these edges.
    waiting = list(
        jobs.filter(id__in=list(last), status__in=AWAITING_PREREQUISITES).values_list(
            "id", flat=True
        )
    )
    Dependency.objects.using(alias).bulk_create(
        Dependency(job_id=dependent, prerequisite_id=child, position=last[dependent] + 1 + n)
        for dependent in waiting
        for n, child in enumerate(children)
    )
    jobs.filter(id__in=waiting, status__in=AWAITING_PREREQUISITES).update(
        waiting_on=F("waiting_on") + len(children)
    )


def first_argument(alias: str, job_id: int, shape: Any) -> Any:
    """The value a step receives first: its prerequisites' results at the positions ``shape``
    names, nested as it nests them (a group's results come as a list, in declared order)."""
    results = dict(
        Dependency.objects.using(alias)
        .filter(job_id=job_id)
        .values_list("position", "prerequisite__result")
    )

    def value(part: Any) -> Any:
        if isinstance(part, list):
            return [value(item) for item in part]
        return results.get(part)

    return value(shape)
