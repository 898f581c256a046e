"""Pictures drawn on the server as SVG: a workflow's graph and the dashboard's charts. No
script and nothing from a CDN; the markup is built with ``format_html``, so every name in it is
escaped."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..workflow.layout import WorkflowGraph

# One hue per status, far enough apart to tell in the legend; the label on each is black or
# white, whichever reads better (label_colour), at least 4.5:1 (WCAG AA) for every one.
STATUS_COLOURS = {
    "blocked": "#adb5bd", "scheduled": "#9775fa", "ready": "#63e6be", "held": "#ffc107",
    "waiting": "#e8590c", "running": "#0a58ca", "succeeded": "#146c43", "failed": "#b02a37",
    "cancelled": "#6c757d",
}  # fmt: skip
UNKNOWN_COLOUR = "#999999"


def _luminance(colour: str) -> float:
    """The relative luminance of ``#rrggbb`` (WCAG 2)."""
    channels = [int(colour[n : n + 2], 16) / 255 for n in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(first: str, second: str) -> float:
    """The WCAG contrast ratio of two ``#rrggbb`` colours (1 to 21)."""
    light, dark = sorted((_luminance(first), _luminance(second)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def label_colour(fill: str) -> str:
    """Black or white: whichever contrasts more with ``fill``."""
    return max(("#000000", "#ffffff"), key=lambda text: contrast(text, fill))


NODE_WIDTH, NODE_HEIGHT = 150, 36
COLUMN, ROW = 200, 56
MARGIN = 12


def _fill(status: str) -> str:
    return STATUS_COLOURS.get(status, UNKNOWN_COLOUR)


def workflow_svg(graph: WorkflowGraph, job_url: Callable[[int], str]) -> SafeString:
    """The graph in layers from left to right: one box per job, coloured by its status and
    linking to ``job_url(job_id)``, one arrow per dependency."""
    where = {
        node.job_id: (MARGIN + node.layer * COLUMN, MARGIN + node.row * ROW) for node in graph.nodes
    }
    width = MARGIN * 2 + max(graph.layers - 1, 0) * COLUMN + NODE_WIDTH
    height = MARGIN * 2 + max(graph.widest - 1, 0) * ROW + NODE_HEIGHT
    edges = format_html_join(
        "\n", '<line class="wq-edge" data-from="{}" data-to="{}" x1="{}" y1="{}" x2="{}" y2="{}" '
        'marker-end="url(#wq-arrow)"/>',
        (
            (edge.prerequisite, edge.job, *_right(where[edge.prerequisite]),
             *_left(where[edge.job]))
            for edge in graph.edges
        ),
    )  # fmt: skip
    nodes = format_html_join(
        "\n",
        '<a href="{}" class="wq-node" data-job="{}" data-status="{}"><title>#{} {} ({})</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="6" fill="{}"/>'
        '<text x="{}" y="{}" fill="{}">#{} {}</text></a>',
        (
            (job_url(node.job_id), node.job_id, node.status, node.job_id, node.task_name,
             node.status, where[node.job_id][0], where[node.job_id][1], NODE_WIDTH, NODE_HEIGHT,
             _fill(node.status), where[node.job_id][0] + 8, where[node.job_id][1] + 22,
             label_colour(_fill(node.status)), node.job_id, _short(node.task_name))
            for node in graph.nodes
        ),
    )  # fmt: skip
    return format_html(
        '<svg class="wq-graph" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" '
        'viewBox="0 0 {} {}" role="img" aria-label="workflow graph">'
        '<defs><marker id="wq-arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"/></marker>'
        "</defs>{}{}</svg>",
        width, height, width, height, edges, nodes,
    )  # fmt: skip


def _right(corner: tuple[int, int]) -> tuple[int, int]:
    """The middle of the right side of the box at ``corner``: where its arrows leave."""
    return corner[0] + NODE_WIDTH, corner[1] + NODE_HEIGHT // 2


def _left(corner: tuple[int, int]) -> tuple[int, int]:
    return corner[0], corner[1] + NODE_HEIGHT // 2


def _short(task_name: str, limit: int = 16) -> str:
    name = task_name.rsplit(".", 1)[-1]
    return name if len(name) <= limit else name[: limit - 1] + "…"


CHART_WIDTH, CHART_HEIGHT = 640, 160
PAD = 30


def bar_chart(
    values: Sequence[float],
    *,
    label: str,
    unit: str = "",
    css_class: str = "wq-chart",
    span: tuple[str, str] = ("", ""),
) -> SafeString:
    """A bar per value (oldest first), scaled to the largest, with the maximum written on the
    axis and ``span`` (the first and last bars' names) under it; an empty series draws an
    empty frame."""
    top = max(values, default=0) or 1
    n = max(len(values), 1)
    slot = (CHART_WIDTH - PAD) / n
    bars = format_html_join(
        "", '<rect class="wq-bar" x="{}" y="{}" width="{}" height="{}"><title>{}</title></rect>',
        (
            (f"{PAD + i * slot:.1f}",
             f"{CHART_HEIGHT - PAD - (value / top) * (CHART_HEIGHT - 2 * PAD):.1f}",
             f"{max(slot - 1, 1):.1f}", f"{(value / top) * (CHART_HEIGHT - 2 * PAD):.1f}",
             f"{value:g}{unit}")
            for i, value in enumerate(values)
        ),
    )  # fmt: skip
    return format_html(
        '<svg class="{}" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" '
        'viewBox="0 0 {} {}" role="img" aria-label="{}">'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#999"/>'
        '<text x="2" y="{}" font-size="10">{}</text><text x="2" y="{}" font-size="10">0</text>'
        '<text x="{}" y="{}" font-size="10">{}</text>'
        '<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>'
        "{}</svg>",
        css_class, CHART_WIDTH, CHART_HEIGHT, CHART_WIDTH, CHART_HEIGHT, label,
        PAD, CHART_HEIGHT - PAD, CHART_WIDTH, CHART_HEIGHT - PAD,
        PAD - 10, f"{top:g}{unit}", CHART_HEIGHT - PAD,
        PAD, CHART_HEIGHT - PAD + 14, span[0], CHART_WIDTH, CHART_HEIGHT - PAD + 14, span[1],
        bars or mark_safe(""),
    )  # fmt: skip
