"""How a table fits the terminal's width: one rule for every table of ``manage.py workqueue``.

Each column says whether it may drop and how far its text may be cut. When the table is too
wide, in this order:

1. long text (a column with a ``floor``) is cut with an ellipsis, down to its floor;
2. the optional columns drop, lowest priority first (``drop`` order; the caller says which
   went, and ``--wide`` shows them);
3. long text is cut further, down to ``LAST_FLOOR`` characters.

The kept columns (``keep``) never drop and are never cut below their floor, so an id or a
status is always whole: a table that still does not fit runs past the edge instead of losing
them (rich would otherwise shrink every column, down to nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.markup import escape
from rich.text import Text

# A table's column divider and the cells' padding (box.SIMPLE_HEAD, padding (0, 1), no edges).
GAP = 3

# The narrowest a cut long-text column gets once every optional column has gone.
LAST_FLOOR = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """One column of a table and how it gives way.

    >>> Column(name="task", keep=True, floor=24)
    """

    name: str
    keep: bool = False
    """Never dropped (an id, a status: what the other subcommands take)."""
    floor: int | None = None
    """Long text: may be cut with an ellipsis down to this width before any column drops."""
    drop: int = 0
    """Among the optional columns, the higher drops first."""
    cut_start: bool = False
    """Cut text at its start (``…tasks.send_receipt``: a dotted path differs at its end)."""
    justify: str = "left"


@dataclass(frozen=True, slots=True, kw_only=True)
class Fit:
    """The columns shown (indexes into the table's columns), their widths, and the dropped."""

    shown: tuple[int, ...]
    widths: tuple[int, ...]
    dropped: tuple[str, ...]


def cell_width(cell: str) -> int:
    """The width of a cell's text on screen (rich markup such as ``[red]failed[/]`` excluded)."""
    return max((Text.from_markup(line).cell_len for line in cell.split("\n")), default=0)


def cut_start(cell: str, width: int) -> str:
    """``cell`` cut to ``width`` at its start, with an ellipsis (markup is dropped when cut)."""
    text = Text.from_markup(cell).plain
    if cell_len(text) <= width:
        return cell
    return escape("…" + text[len(text) - width + 1 :]) if width > 1 else "…"


def natural_widths(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> list[int]:
    return [
        max([len(column.name), *(cell_width(row[n]) for row in rows)])
        for n, column in enumerate(columns)
    ]


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int | None) -> Fit:
    """Which columns to show at ``width`` (``None``: every column whole, for ``--wide``)."""
    natural = natural_widths(columns, rows)
    widths = dict(enumerate(natural))
    if width is None:
        return Fit(shown=tuple(widths), widths=tuple(natural), dropped=())

    def total() -> int:
        return sum(widths.values()) + GAP * (len(widths) - 1)

    def cut(floor: Callable[[Column], int]) -> None:
        # The rightmost long text first: an error message gives way before a task name.
        for n in sorted((n for n in widths if columns[n].floor is not None), reverse=True):
            excess = total() - width
            if excess <= 0:
                return
            least = min(max(floor(columns[n]), len(columns[n].name)), natural[n])
            widths[n] = max(least, widths[n] - excess)

    cut(lambda column: column.floor or 0)
    optional = sorted(
        (n for n, column in enumerate(columns) if not column.keep),
        key=lambda n: -columns[n].drop,
    )
    dropped = []
    for n in optional:
        if total() <= width:
            break
        del widths[n]
        dropped.append(columns[n].name)
    cut(lambda column: LAST_FLOOR)
    shown = tuple(sorted(widths))
    return Fit(
        shown=shown, widths=tuple(widths[n] for n in shown), dropped=tuple(reversed(dropped))
    )
