"""The workflow graph's colours: every label readable on its box (WCAG AA, 4.5:1), and the
legend's colours far enough apart to tell one status from another."""

from __future__ import annotations

import itertools
import re

import pytest

from django_workqueue.admin.svg import STATUS_COLOURS, contrast, label_colour, workflow_svg
from django_workqueue.states import Status
from django_workqueue.workflow.layout import Node, WorkflowGraph


def test_contrast_is_the_wcag_ratio():
    assert contrast("#000000", "#ffffff") == pytest.approx(21)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)


@pytest.mark.parametrize("status", sorted(STATUS_COLOURS))
def test_every_label_meets_4_5_to_1_on_its_box(status):
    fill = STATUS_COLOURS[status]

    assert contrast(label_colour(fill), fill) >= 4.5


def test_every_status_has_a_colour():
    assert set(STATUS_COLOURS) == set(Status.values)


def _distance(first: str, second: str) -> float:
    a, b = ([int(c[n : n + 2], 16) for n in (1, 3, 5)] for c in (first, second))
    return sum((x - y) ** 2 for x, y in zip(a, b, strict=True)) ** 0.5


def test_the_legend_colours_are_far_apart():
    pairs = itertools.combinations(STATUS_COLOURS.items(), 2)
    closest = min(pairs, key=lambda pair: _distance(pair[0][1], pair[1][1]))

    assert _distance(closest[0][1], closest[1][1]) >= 80, closest


def test_the_drawn_labels_meet_4_5_to_1_on_their_boxes():
    nodes = tuple(
        Node(job_id=n, task_name="shop.tasks.step", status=status, layer=n, row=0)
        for n, status in enumerate(sorted(STATUS_COLOURS))
    )
    graph = WorkflowGraph(nodes=nodes, edges=(), truncated=False)

    svg = str(workflow_svg(graph, lambda job_id: f"/job/{job_id}/"))

    drawn = re.findall(r'<rect [^>]*fill="(#\w+)"/><text [^>]*fill="(#\w+)"', svg)
    assert len(drawn) == len(nodes)
    assert all(contrast(text, fill) >= 4.5 for fill, text in drawn)
