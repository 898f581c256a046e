"""A workflow's graph in layers: every edge points to a later layer, rows count from 0 within a
layer, and a workflow larger than the limit is cut and says so."""

from __future__ import annotations

import pytest

from django_workqueue import chain, group
from django_workqueue.workflow.layout import workflow_graph
from testproject.testapp.tasks import add, double, echo, total

pytestmark = pytest.mark.django_db


def test_a_fan_out_and_fan_in_is_three_layers():
    wf = chain(add.s(1, 2), group(double.s(), double.s(), echo.s()), total.s()).enqueue()

    graph = workflow_graph(wf)

    layers = sorted((n.layer, n.row, n.task_name.rsplit(".", 1)[1]) for n in graph.nodes)
    assert [layer for layer, _, _ in layers] == [0, 1, 1, 1, 2]
    assert [row for layer, row, _ in layers if layer == 1] == [0, 1, 2]
    assert layers[-1][2] == "total"
    depth = {node.job_id: node.layer for node in graph.nodes}
    assert all(depth[edge.prerequisite] < depth[edge.job] for edge in graph.edges)
    assert len(graph.edges) == 6
    assert (graph.layers, graph.widest, graph.truncated) == (3, 3, False)


def test_a_workflow_larger_than_the_limit_is_cut_to_its_first_jobs():
    wf = group(*[echo.s(n) for n in range(5)]).enqueue()

    graph = workflow_graph(wf, limit=3)

    assert graph.truncated is True
    assert [node.job_id for node in graph.nodes] == sorted(wf.jobs.values_list("id", flat=True))[:3]


def test_the_graph_as_json_names_nodes_and_edges():
    wf = chain(add.s(1, 2), double.s()).enqueue()
    first, second = wf.jobs.order_by("id")

    data = workflow_graph(wf).as_dict()

    assert data["edges"] == [{"from": first.pk, "to": second.pk}]
    assert [node["layer"] for node in data["nodes"]] == [0, 1]
    assert data["truncated"] is False
