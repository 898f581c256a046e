"""A workflow's graph laid out in layers, for the admin's SVG and the API's ``graph``.

A job's layer is the length of the longest path of dependencies leading to it (roots are layer
0), so every edge points to a later layer; within a layer jobs keep the order of their ids.
Large workflows are cut at ``MAX_NODES`` jobs (the first ones, by id) and say so.

>>> graph = workflow_graph(workflow)
>>> [(node.job_id, node.layer) for node in graph.nodes]
[(1, 0), (2, 1), (3, 1), (4, 2)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..models import Dependency, Job, Workflow

MAX_NODES = 500
"""The most jobs a drawn graph holds; a larger workflow is cut (``WorkflowGraph.truncated``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    job_id: int
    task_name: str
    status: str
    layer: int
    row: int
    """The job's place within its layer, from 0."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Edge:
    prerequisite: int
    job: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowGraph:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    truncated: bool
    """True when the workflow has more than ``MAX_NODES`` jobs and only the first are here."""

    @property
    def layers(self) -> int:
        return 1 + max((node.layer for node in self.nodes), default=-1)

    @property
    def widest(self) -> int:
        return 1 + max((node.row for node in self.nodes), default=-1)

    def as_dict(self) -> dict[str, Any]:
        return {
            "nodes": [
                {"id": node.job_id, "task_name": node.task_name, "status": node.status,
                 "layer": node.layer, "row": node.row}
                for node in self.nodes
            ],
            "edges": [{"from": edge.prerequisite, "to": edge.job} for edge in self.edges],
            "truncated": self.truncated,
        }  # fmt: skip


def workflow_graph(workflow: Workflow, *, limit: int = MAX_NODES) -> WorkflowGraph:
    """The jobs of ``workflow`` and their dependencies, laid out in layers (two queries)."""
    alias = workflow._state.db or "default"
    rows = list(
        Job.objects.using(alias)
        .filter(workflow_id=workflow.pk)
        .order_by("id")
        .values_list("id", "task_name", "status")[: limit + 1]
    )
    truncated = len(rows) > limit
    rows = rows[:limit]
    ids = {row[0] for row in rows}
    edges = [
        Edge(prerequisite=prerequisite, job=job)
        for job, prerequisite in Dependency.objects.using(alias)
        .filter(job_id__in=ids)
        .order_by("job_id", "position")
        .values_list("job_id", "prerequisite_id")
        if prerequisite in ids
    ]
    layer = _layers([row[0] for row in rows], edges)
    rows_in_layer: dict[int, int] = {}
    nodes = []
    for job_id, task_name, status in rows:
        depth = layer[job_id]
        row = rows_in_layer.get(depth, 0)
        rows_in_layer[depth] = row + 1
        nodes.append(Node(job_id=job_id, task_name=task_name, status=status, layer=depth, row=row))
    return WorkflowGraph(nodes=tuple(nodes), edges=tuple(edges), truncated=truncated)


def _layers(ids: list[int], edges: list[Edge]) -> dict[int, int]:
    """Longest-path depth of every job (Kahn's order; the graph is acyclic by construction,
    and any job left over by a cycle is put after the rest rather than lost)."""
    prerequisites: dict[int, list[int]] = {job_id: [] for job_id in ids}
    dependents: dict[int, list[int]] = {job_id: [] for job_id in ids}
    for edge in edges:
        prerequisites[edge.job].append(edge.prerequisite)
        dependents[edge.prerequisite].append(edge.job)
    waiting = {job_id: len(prerequisites[job_id]) for job_id in ids}
    depth = dict.fromkeys(ids, 0)
    ready = [job_id for job_id in ids if waiting[job_id] == 0]
    done: set[int] = set()
    while ready:
        job_id = ready.pop()
        done.add(job_id)
        for dependent in dependents[job_id]:
            depth[dependent] = max(depth[dependent], depth[job_id] + 1)
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                ready.append(dependent)
    last = max(depth.values(), default=0)
    for job_id in ids:
        if job_id not in done:
            depth[job_id] = last + 1
    return depth
