"""Workflows as a property: random graphs of jobs, ended in random orders without a worker, keep
every invariant of the release engine after every step.

Hypothesis grows a graph of up to 12 jobs step by step: single jobs, enqueued plainly or with
``task.using(depends_on=[...], run_if=...)``, and small compositions (chains and groups, nested,
whose steps may name existing jobs in ``depends_on`` too). A job can only name jobs that exist,
so edges go from earlier jobs to later ones, and they may cross workflows. Some jobs are delayed
(an hour), so that they are scheduled, and released to ``scheduled``, for the whole example.
Between additions it ends jobs as an operator or a webhook would, without any worker:
``operations.complete_job``, ``fail_job`` or ``cancel_job`` on a random open job (blocked ones
too), now and then on a finished one (which must change nothing), or ``cancel_workflow``.
Finally it ends every open job the same way, one released job at a time.

After every step, read back from the database:

- the jobs and edges are those the steps declared (edges in declared order), each job in the
  workflow the rules place it in, each workflow's output the shape its composition gives;
- each workflow's counters equal the counts of its jobs' statuses (open = not terminal), and it
  is finished (``finished_at`` set, status failed / cancelled / succeeded from its counters)
  exactly when none of its jobs is open;
- every blocked job waits for as many prerequisites as are not finished (``waiting_on``) and
  counts those that succeeded (``prerequisites_succeeded``);
- every job the test did not end itself is in the state its run condition implies given its
  prerequisites' statuses: cancelled, with one ``DependencyFailed`` error naming a prerequisite
  that did not succeed, once the condition can no longer be met; blocked while a prerequisite
  is open and it still may be; released (ready, or scheduled when its run_after is later) once
  it holds. Jobs the test ended have the status it gave them.

At the end every workflow is finished, its result its output shape filled with its jobs'
results.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from django_workqueue import chain, group, operations
from django_workqueue.models import Dependency, Job, Workflow
from django_workqueue.states import TERMINAL, RunCondition, Status, WorkflowStatus
from django_workqueue.workflow.canvas import Composition, Step
from tests.support.database import db_now
from tests.support.tasks import graph_node

pytestmark = pytest.mark.django_db(transaction=True)

FULL = os.environ.get("WORKQUEUE_CHAOS", "").lower() == "full"
MAX_JOBS = 12
CONDITIONS = [condition.value for condition in RunCondition]
WAITING = (Status.BLOCKED, Status.SCHEDULED, Status.READY)
DELAY = 3600  # seconds: a delayed job stays scheduled for the whole example
UNMET = "django_workqueue.exceptions.DependencyFailed"
ENDINGS = {"complete": Status.SUCCEEDED, "fail": Status.FAILED, "cancel": Status.CANCELLED}
ACTIONS = {"complete": "completed", "fail": "failed", "cancel": "cancelled"}


@dataclasses.dataclass
class Leaf:
    """One signature of a composition."""

    label: int
    depends_on: list[int]
    run_if: str
    delayed: bool


@dataclasses.dataclass
class Part:
    """A chain or a group of leaves and parts."""

    kind: str
    parts: list[Leaf | Part]


@dataclasses.dataclass
class Model:
    """What the test declared and did; the engine's decisions are read from the database."""

    labels: Iterator[int] = dataclasses.field(default_factory=lambda: iter(range(1, 10**6)))
    order: list[int] = dataclasses.field(default_factory=list)  # job ids, as created
    edges: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    run_if: dict[int, str] = dataclasses.field(default_factory=dict)
    workflow: dict[int, int | None] = dataclasses.field(default_factory=dict)
    outputs: dict[int, Any] = dataclasses.field(default_factory=dict)  # workflow: shape of ids
    ended: dict[int, str] = dataclasses.field(default_factory=dict)  # jobs the test ended
    seen: set[str] = dataclasses.field(default_factory=set)  # what the example covered

    def created(self, job_id: int, edges: list[int], run_if: str, workflow: int | None) -> None:
        self.order.append(job_id)
        self.edges[job_id] = edges
        self.run_if[job_id] = run_if
        self.workflow[job_id] = workflow

    def adopt(self, prerequisites: list[int], jobs: dict[int, dict[str, Any]], into: int) -> None:
        """Open prerequisites in no workflow join the workflow of the job that names them."""
        for pk in prerequisites:
            if self.workflow[pk] is None and jobs[pk]["status"] not in TERMINAL:
                self.workflow[pk] = into


# --- reading the database back ----------------------------------------------------------------


def read_jobs() -> dict[int, dict[str, Any]]:
    fields = ("id", "status", "waiting_on", "prerequisites_succeeded", "run_condition",
              "errors", "run_after", "workflow_id", "result", "finished_at")  # fmt: skip
    return {row["id"]: row for row in Job.objects.values(*fields)}


def read_edges() -> dict[int, list[int]]:
    edges: dict[int, list[int]] = collections.defaultdict(list)
    rows = Dependency.objects.order_by("job_id", "position").values_list(
        "job_id", "prerequisite_id"
    )
    for job_id, prerequisite in rows:
        edges[job_id].append(prerequisite)
    return dict(edges)


def expected_status(
    job_id: int, model: Model, jobs: dict[int, dict[str, Any]], now: dt.datetime
) -> str:
    """The status the run condition implies, given the prerequisites' statuses in ``jobs``."""
    if job_id in model.ended:
        return model.ended[job_id]
    released = Status.READY if jobs[job_id]["run_after"] <= now else Status.SCHEDULED
    prerequisites = model.edges[job_id]
    if not prerequisites:
        return released
    statuses = [jobs[pk]["status"] for pk in prerequisites]
    still_open = sum(status not in TERMINAL for status in statuses)
    succeeded = statuses.count(Status.SUCCEEDED)
    condition = model.run_if[job_id]
    if condition == RunCondition.ALL_SUCCEEDED and still_open + succeeded < len(statuses):
        return Status.CANCELLED
    if still_open:
        return Status.BLOCKED
    if condition == RunCondition.ANY_SUCCEEDED and not succeeded:
        return Status.CANCELLED
    return released


def check(model: Model) -> dict[int, dict[str, Any]]:
    """Every invariant of the module docstring; returns the jobs as read."""
    now = db_now()
    jobs = read_jobs()
    assert sorted(jobs) == sorted(model.order), "jobs lost or invented"
    assert read_edges() == {pk: edges for pk, edges in model.edges.items() if edges}
    for pk, job in jobs.items():
        assert job["workflow_id"] == model.workflow[pk], f"job {pk} in the wrong workflow"
        assert job["run_condition"] == model.run_if[pk]
        status = expected_status(pk, model, jobs, now)
        assert job["status"] == status, f"job {pk} is {job['status']}, expected {status}"
        if model.edges[pk] and pk not in model.ended:
            model.seen.add(f"{status} by run_if={model.run_if[pk]}")
        if any(model.workflow[p] != model.workflow[pk] for p in model.edges[pk]):
            model.seen.add("an edge across workflows")
        statuses = [jobs[p]["status"] for p in model.edges[pk]]
        if job["status"] == Status.BLOCKED:
            counted = (sum(s not in TERMINAL for s in statuses), statuses.count(Status.SUCCEEDED))
            assert (job["waiting_on"], job["prerequisites_succeeded"]) == counted, (
                f"blocked job {pk}: counters differ from its prerequisites {statuses}"
            )
        unmet = [e for e in job["errors"] if e["type"] == UNMET]
        if pk in model.ended or job["status"] != Status.CANCELLED:
            assert not unmet, f"job {pk} has a DependencyFailed error: {unmet}"
            continue
        assert len(unmet) == 1, f"cancelled job {pk}: errors {job['errors']}"
        named = unmet[0]["prerequisite"]
        if model.run_if[pk] == RunCondition.ALL_SUCCEEDED:
            assert named in model.edges[pk] and jobs[named]["status"] != Status.SUCCEEDED
        else:
            assert named is None or named in model.edges[pk]
    for workflow in Workflow.objects.all():
        members = [job["status"] for job in jobs.values() if job["workflow_id"] == workflow.pk]
        counted = collections.Counter(members)
        still_open = sum(n for status, n in counted.items() if status not in TERMINAL)
        assert workflow.counts == {
            "total": len(members), "open": still_open, "succeeded": counted[Status.SUCCEEDED],
            "failed": counted[Status.FAILED], "cancelled": counted[Status.CANCELLED],
        }, f"workflow {workflow.pk}: counters differ from its jobs' statuses {members}"  # fmt: skip
        assert workflow.output == model.outputs[workflow.pk]
        if still_open:
            assert (workflow.status, workflow.finished_at) == (WorkflowStatus.RUNNING, None)
        else:
            assert workflow.finished_at is not None, f"workflow {workflow.pk} not finished"
            assert workflow.status == finished_status(counted), f"workflow {workflow.pk}"
            results = {pk: job["result"] for pk, job in jobs.items()}
            assert workflow.result == filled(workflow.output, results)
    return jobs


def finished_status(counted: collections.Counter[str]) -> str:
    if counted[Status.FAILED]:
        return WorkflowStatus.FAILED
    if counted[Status.CANCELLED]:
        return WorkflowStatus.CANCELLED
    return WorkflowStatus.SUCCEEDED


def filled(shape: Any, results: dict[int, Any]) -> Any:
    if isinstance(shape, list):
        return [filled(part, results) for part in shape]
    return None if shape is None else results[shape]


# --- steps --------------------------------------------------------------------------------------


def add_job(data: st.DataObject, model: Model, jobs: dict[int, dict[str, Any]]) -> None:
    """One job: plain, or with ``using(depends_on=..., run_if=...)`` (joins the workflow of its
    first prerequisite that has one, else starts one)."""
    prerequisites = data.draw(
        st.lists(st.sampled_from(model.order), unique=True, max_size=4) if model.order
        else st.just([]), label="depends_on",
    )  # fmt: skip
    plain = not prerequisites and data.draw(st.booleans(), label="plain")
    run_if = data.draw(st.sampled_from(CONDITIONS), label="run_if")
    delayed = data.draw(st.sampled_from([False, False, True]), label="delayed")
    label = next(model.labels)
    options: dict[str, Any] = {"delay": DELAY} if delayed else {}
    if plain:
        job = graph_node.using(**options).enqueue(label=label)
        note(f"job {job.pk} = graph_node.using({options}).enqueue()")
        model.created(job.pk, [], RunCondition.ALL_SUCCEEDED, None)
        return
    cancelled = set(
        Workflow.objects.filter(cancel_requested_at__isnull=False).values_list("pk", flat=True)
    )
    joined = next(
        (model.workflow[p] for p in prerequisites
         if model.workflow[p] and model.workflow[p] not in cancelled),
        None,
    )  # fmt: skip
    if joined and Workflow.objects.filter(pk=joined, finished_at__isnull=False).exists():
        model.seen.add("a job joined a finished workflow")
    job = graph_node.using(depends_on=prerequisites, run_if=run_if, **options).enqueue(label=label)
    note(f"job {job.pk} = using(depends_on={prerequisites}, run_if={run_if!r}, {options})")
    if joined is None:
        assert job.workflow_id not in model.outputs, "a new workflow expected"
        model.outputs[job.workflow_id] = job.pk
    else:
        assert job.workflow_id == joined, "the workflow of its first prerequisite expected"
    model.created(job.pk, prerequisites, run_if, job.workflow_id)
    model.adopt(prerequisites, jobs, job.workflow_id)


def draw_part(data: st.DataObject, model: Model, budget: list[int], depth: int) -> Part:
    kind = data.draw(st.sampled_from(["chain", "group"]), label="composition")
    count = data.draw(st.integers(1 if kind == "chain" else 0, 3), label="steps")
    parts: list[Leaf | Part] = []
    for _ in range(count):
        if budget[0] == 0:
            break
        if depth < 2 and data.draw(st.integers(0, 3), label="nest") == 0:
            parts.append(draw_part(data, model, budget, depth + 1))
            continue
        budget[0] -= 1
        depends_on = data.draw(
            st.lists(st.sampled_from(model.order), unique=True, max_size=2) if model.order
            else st.just([]), label="depends_on",
        )  # fmt: skip
        run_if = data.draw(st.sampled_from(CONDITIONS), label="run_if")
        delayed = data.draw(st.sampled_from([False, False, False, True]), label="delayed")
        parts.append(Leaf(next(model.labels), depends_on, run_if, delayed))
    return Part(kind, parts)


def build(part: Leaf | Part) -> Step:
    if isinstance(part, Leaf):
        options: dict[str, Any] = {"run_if": part.run_if}
        if part.depends_on:
            options["depends_on"] = part.depends_on
        if part.delayed:
            options["delay"] = DELAY
        return graph_node.using(**options).s(label=part.label)
    steps = [build(p) for p in part.parts]
    return chain(*steps) if part.kind == "chain" else group(*steps)


def compile_edges(
    part: Leaf | Part, after: list[int], ids: dict[int, int], model: Model, workflow: int
) -> tuple[list[int], Any]:
    """What the composition declares: each job waits for the jobs before it, then for the jobs
    it names; returns (its last jobs, its value's shape over job ids)."""
    if isinstance(part, Leaf):
        pk = ids[part.label]
        model.created(pk, [*after, *part.depends_on], part.run_if, workflow)
        return [pk], pk
    if part.kind == "chain":
        shape: Any = None
        for step in part.parts:
            after, shape = compile_edges(step, after, ids, model, workflow)
        return after, shape
    sinks: list[int] = []
    shapes: list[Any] = []
    for member in part.parts:
        member_sinks, member_shape = compile_edges(member, after, ids, model, workflow)
        sinks += member_sinks
        shapes.append(member_shape)
    return sinks, shapes


def leaves(part: Leaf | Part) -> Iterator[Leaf]:
    if isinstance(part, Leaf):
        yield part
    else:
        for child in part.parts:
            yield from leaves(child)


def add_composition(data: st.DataObject, model: Model, jobs: dict[int, dict[str, Any]]) -> None:
    """A chain or group (nested), a new workflow; its steps may name existing jobs."""
    part = draw_part(data, model, [MAX_JOBS - len(model.order)], 0)
    step = build(part)
    assert isinstance(step, Composition)
    workflow = step.enqueue()
    note(f"workflow {workflow.pk} = {part}")
    assert workflow.pk not in model.outputs, "a new workflow expected"
    labels = {leaf.label for leaf in leaves(part)}
    ids = {
        job.kwargs["label"]: job.pk
        for job in Job.objects.filter(workflow=workflow)
        if job.kwargs["label"] in labels
    }
    _, shape = compile_edges(part, [], ids, model, workflow.pk)
    model.outputs[workflow.pk] = shape
    if any(isinstance(p, Part) for p in part.parts):
        model.seen.add("a nested composition")
    model.adopt([pk for leaf in leaves(part) for pk in leaf.depends_on], jobs, workflow.pk)


def end_job(
    data: st.DataObject, model: Model, jobs: dict[int, dict[str, Any]], targets: list[int]
) -> None:
    """complete_job / fail_job / cancel_job on one of ``targets``; on a finished job nothing
    may change."""
    pk = data.draw(st.sampled_from(sorted(targets)), label="job")
    how = data.draw(st.sampled_from(sorted(ENDINGS)), label="ending")
    note(f"{how} job {pk} ({jobs[pk]['status']})")
    before = (list(Job.objects.order_by("id").values()), list(Workflow.objects.values()))
    if how == "complete":
        result = operations.complete_job(pk, {"completed": pk})
    elif how == "fail":
        result = operations.fail_job(pk, "failed by the property test")
    else:
        result = operations.cancel_job(pk)
    if jobs[pk]["status"] in TERMINAL:
        assert result.action == "unchanged", result
        after = (list(Job.objects.order_by("id").values()), list(Workflow.objects.values()))
        assert after == before, f"ending a finished job changed rows: {result}"
    else:
        assert result.action == ACTIONS[how], result
        model.ended[pk] = ENDINGS[how]


def cancel_a_workflow(data: st.DataObject, model: Model, jobs: dict[int, dict[str, Any]]) -> None:
    workflow = data.draw(st.sampled_from(sorted(model.outputs)), label="workflow")
    waiting = [pk for pk, job in jobs.items()
               if job["workflow_id"] == workflow and job["status"] in WAITING]  # fmt: skip
    note(f"cancel_workflow({workflow}): waiting {waiting}")
    result = operations.cancel_workflow(workflow)
    assert (result.action, result.count) == ("cancelled" if waiting else "unchanged", len(waiting))
    for pk in waiting:
        model.ended[pk] = Status.CANCELLED


# --- the property ---------------------------------------------------------------------------------


@settings(
    max_examples=500 if FULL else 50,
    deadline=None,
    database=None,  # no .hypothesis directory in the repository; failures print a blob
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_workflows_keep_counters_and_run_conditions_at_every_step(
    data: st.DataObject,
) -> None:
    for model_class in (Dependency, Job, Workflow):  # the previous example's rows
        model_class.objects.all().delete()
    model = Model()
    jobs = check(model)
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        open_jobs = [pk for pk, job in jobs.items() if job["status"] not in TERMINAL]
        kinds = ["add_job", "add_composition"] if len(model.order) < MAX_JOBS else []
        if open_jobs:
            kinds += ["end_job", "end_job", "end_job"]
        if len(open_jobs) < len(jobs):
            kinds.append("end_finished_job")
        if model.outputs:
            kinds.append("cancel_workflow")
        kind = data.draw(st.sampled_from(kinds), label="kind")
        if kind == "add_job":
            add_job(data, model, jobs)
        elif kind == "add_composition":
            add_composition(data, model, jobs)
        elif kind == "end_job":
            released = [pk for pk in open_jobs if jobs[pk]["status"] != Status.BLOCKED]
            blocked_too = not released or data.draw(st.booleans(), label="blocked too")
            end_job(data, model, jobs, open_jobs if blocked_too else released)
        elif kind == "end_finished_job":
            end_job(data, model, jobs, [pk for pk in jobs if pk not in open_jobs])
        else:
            cancel_a_workflow(data, model, jobs)
        jobs = check(model)

    # End every open job, one released job at a time: a blocked job always waits for an open
    # prerequisite, so while a job is open, one is released.
    while open_jobs := [pk for pk, job in jobs.items() if job["status"] not in TERMINAL]:
        released = [pk for pk in open_jobs if jobs[pk]["status"] != Status.BLOCKED]
        assert released, f"open jobs {open_jobs}, none released"
        end_job(data, model, jobs, released)
        jobs = check(model)
    unfinished = Workflow.objects.filter(finished_at__isnull=True).values_list("id", flat=True)
    assert not list(unfinished), "every job ended, but these workflows are not finished"
    for what in sorted(model.seen):  # shown by --hypothesis-show-statistics
        event(what)
