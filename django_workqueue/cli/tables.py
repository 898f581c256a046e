"""The terminal rendering of ``reports``' data with ``rich``: tables that fit the terminal's
width (long columns are cut with an ellipsis, never wrapped), colour only on a terminal, and the
progress bar of long operations (on stderr, only when it is a terminal, so that piped output
stays clean)."""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any, Protocol, cast

from rich import box
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import budgets
from .fitting import Column, cut_start, fit
from .reports import STATUSES

_STATUS_STYLES = {
    "failed": "red", "cancelled": "yellow", "succeeded": "green", "running": "cyan",
    "held": "magenta", "waiting": "blue",
}  # fmt: skip


class Stream(Protocol):
    def write(self, msg: str = ..., style_func: Any = ..., ending: str | None = ...) -> None: ...
    def isatty(self) -> bool: ...


class _Raw:
    """A file for rich over a command's ``OutputWrapper``: written as is (no added endings)."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(text, ending="")
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return bool(self.stream.isatty())


def _width(tty: bool) -> int:
    """The terminal's width; ``COLUMNS`` when set; 100 when not a terminal."""
    if tty or "COLUMNS" in os.environ:
        return shutil.get_terminal_size((100, 24)).columns
    return 100


def console(stream: Stream) -> Console:
    """A console writing to ``stream`` as wide as the terminal, in colour only on one."""
    tty = bool(stream.isatty())
    return Console(
        file=cast(IO[str], _Raw(stream)), width=_width(tty), force_terminal=tty,
        no_color=not tty, color_system="auto" if tty else None, highlight=False, soft_wrap=False,
    )  # fmt: skip


def terminal_width(stream: Stream) -> int:
    """The width tables fit (``--wide`` passes ``None`` to renderers instead)."""
    return _width(bool(stream.isatty()))


def show(stream: Stream, renderables: list[RenderableType]) -> None:
    """Print ``renderables``; off a terminal as plain text without trailing blanks (what
    scripts and golden files compare). A table as wide as its fitted columns is printed whole
    even past the terminal's edge (``fitting`` decided what it keeps)."""
    tty = bool(stream.isatty())
    buffer = None if tty else io.StringIO()
    out = console(stream) if buffer is None else _plain(buffer)
    screen = out.width
    for n, renderable in enumerate(renderables):
        fitted = isinstance(renderable, Table) and all(c.width for c in renderable.columns)
        out.width = screen
        if fitted:  # measured without the terminal's bound, which would shrink it again
            unbounded = out.options.update_width(_UNBOUNDED)
            out.width = max(screen, out.measure(renderable, options=unbounded).maximum)
        out.print(*([""] if n else []), renderable, sep="\n")
    if buffer is not None:
        stream.write("\n".join(line.rstrip() for line in buffer.getvalue().splitlines()))


_UNBOUNDED = 100_000


def _plain(buffer: io.StringIO) -> Console:
    return Console(
        file=buffer, width=_width(False), no_color=True, color_system=None, highlight=False,
        soft_wrap=False,
    )  # fmt: skip


def dump(stream: Stream, data: Any) -> None:
    """``--json``: one JSON document on stdout."""
    stream.write(json.dumps(data, indent=2, sort_keys=False, default=str))


def _table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    width: int | None,
    *,
    title: str | None = None,
    total: Sequence[str] | None = None,
) -> tuple[Table, tuple[str, ...]]:
    """A table of ``rows`` (and a ``total`` row below a rule) fitted to ``width``
    (``fitting.fit``), and the names of the columns that did not fit."""
    fitted = fit(columns, [*rows, *([total] if total else [])], width)
    table = Table(
        box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False
    )
    for n, column_width in zip(fitted.shown, fitted.widths, strict=True):
        table.add_column(
            columns[n].name, justify=cast(Any, columns[n].justify), no_wrap=True,
            overflow="ellipsis", width=column_width,
        )  # fmt: skip

    def cells(row: Sequence[str]) -> list[str]:
        return [
            cut_start(row[n], column_width) if columns[n].cut_start else row[n]
            for n, column_width in zip(fitted.shown, fitted.widths, strict=True)
        ]

    for row in rows:
        table.add_row(*cells(row))
    if total:
        table.add_section()
        table.add_row(*cells(total))
    return table, fitted.dropped


def _dropped_note(dropped: Sequence[str]) -> list[RenderableType]:
    if not dropped:
        return []
    return [f"Not shown at this width: {', '.join(dropped)} (--wide or --json shows them)."]


def _attempt(row: dict[str, Any]) -> str:
    """The attempt column: "2/5", or "1/5 (+3)" after a redrive (``budgets.describe``)."""
    return budgets.describe(
        status=row["status"], attempts_charged=row["attempts_charged"],
        max_attempts=row["max_attempts"], redriven_attempts=row["redriven_attempts"], short=True,
    )  # fmt: skip


def _when(value: str | None) -> str:
    """An ISO timestamp as ``YYYY-MM-DD hh:mm:ss`` (UTC)."""
    return "" if value is None else value[:19].replace("T", " ")


def _status(value: str) -> str:
    style = _STATUS_STYLES.get(value)
    return f"[{style}]{value}[/]" if style else value


# The counts of waiting and running jobs, then of finished ones: the two halves the status
# table splits into when the terminal is too narrow for both side by side.
_STATUS_HALVES = (
    (STATUSES[: STATUSES.index("running") + 1], "Jobs by queue and status: waiting and running"),
    (STATUSES[STATUSES.index("running") + 1 :], "Jobs by queue and status: finished"),
)


def status(data: dict[str, Any], width: int | None) -> list[RenderableType]:
    """Jobs by queue and status: one table, or two (waiting, finished) when the terminal is too
    narrow for both side by side. No count drops; a long queue name is cut."""
    names = [queue["name"] + (" (paused)" if queue["paused"] else "") for queue in data["queues"]]

    def table(statuses: Sequence[str], title: str, *, split: bool) -> tuple[Table, tuple[str, ...]]:
        # Whole, a count that does not fit tells that the table must split; split, none drops.
        columns = [
            Column(name="queue", keep=True, floor=12),
            *(Column(name=name, keep=split, justify="right") for name in statuses),
        ]
        rows = [
            [name, *(str(queue["counts"][s]) for s in statuses)]
            for name, queue in zip(names, data["queues"], strict=True)
        ]
        total = ["total", *(str(data["totals"][s]) for s in statuses)]
        return _table(columns, rows, width, title=title, total=total)

    whole, dropped = table(STATUSES, "Jobs by queue and status", split=False)
    shown: list[RenderableType] = [whole]
    if dropped:
        shown = [table(statuses, title, split=True)[0] for statuses, title in _STATUS_HALVES]
    return [*shown, *workers(data["workers"], width)]


_WORKER_COLUMNS = (
    Column(name="worker", keep=True, floor=13),
    Column(name="host", keep=True, floor=24),
    Column(name="pid", drop=5),
    Column(name="queues", floor=12, drop=3),
    Column(name="slots", drop=4),
    Column(name="running", keep=True, justify="right"),
    Column(name="started", drop=6),
    Column(name="last seen", drop=2),
)


def workers(rows: list[dict[str, Any]], width: int | None) -> list[RenderableType]:
    """The live workers; the id, host and running count never drop."""
    if not rows:
        return ["No live workers."]
    cells = []
    for row in rows:
        slots = str(row["slots"])
        if row["slots_range"]:
            slots += " ({}-{})".format(*row["slots_range"])
        cells.append([
            escape(row["id"]), escape(row["host"]), str(row["pid"]),
            escape(",".join(row["queues"])), slots, str(row["running"]),
            _when(row["started_at"]), _when(row["last_seen_at"]),
        ])  # fmt: skip
    table, dropped = _table(_WORKER_COLUMNS, cells, width, title="Workers")
    return [table, *_dropped_note(dropped)]


# What ``show``, ``cancel`` and ``redrive`` take (the id), what the job is and where it stands
# never drop; the error is cut before the task, and of the others it drops last.
_JOB_COLUMNS = (
    Column(name="id", keep=True, justify="right"),
    Column(name="task", keep=True, floor=24, cut_start=True),
    Column(name="queue", drop=2),
    Column(name="status", keep=True),
    Column(name="attempt", drop=3),
    Column(name="since", drop=4),
    Column(name="last error", floor=20, drop=1),
)


def jobs(rows: list[dict[str, Any]], limit: int, width: int | None) -> list[RenderableType]:
    if not rows:
        return ["No jobs match."]
    cells = [
        [
            str(row["id"]), escape(row["task"]), escape(row["queue"]), _status(row["status"]),
            _attempt(row), _when(since(row)),
            _error(row["last_error"]),
        ]
        for row in rows
    ]  # fmt: skip
    table, dropped = _table(_JOB_COLUMNS, cells, width)
    shown: list[RenderableType] = [table, *_dropped_note(dropped)]
    if len(rows) == limit:
        shown.append(f"The newest {limit} shown; --limit N shows more.")
    return shown


def since(row: dict[str, Any]) -> str | None:
    """When the job entered its status: finished, started, due (scheduled) or enqueued."""
    if row["finished_at"]:
        return str(row["finished_at"])
    if row["status"] == "running":
        return row["started_at"]
    if row["status"] == "scheduled":
        return row["run_after"]
    return row["enqueued_at"]


def _error(error: dict[str, Any] | None) -> str:
    """``ValueError: boom`` (the type without its module), as text for a table cell."""
    if not error:
        return ""
    kind = str(error.get("type") or "").rpartition(".")[2]
    return escape(f"{kind}: {error.get('message') or ''}")


def job(data: dict[str, Any]) -> list[RenderableType]:
    fields = Table(box=box.SIMPLE, show_header=False, pad_edge=False, show_edge=False)
    fields.add_column("field", style="bold", no_wrap=True)
    fields.add_column("value", overflow="fold")
    for name in _SCALARS:
        value = data[name]
        if value is None or value == "":
            continue
        text = _when(value) if name in _TIMES else str(value)
        fields.add_row(name, _status(text) if name == "status" else escape(text))
    for name in ("args", "kwargs", "result"):
        hidden = data.get("payload_hidden")
        fields.add_row(name, _HIDDEN if hidden else escape(json.dumps(data[name])))
    progress = data["progress"]
    if progress["current"] is not None or progress["message"]:
        fields.add_row("progress", escape(_progress(progress)))
    for name in ("prerequisites", "dependents"):
        if data[name]:
            fields.add_row(name, ", ".join(map(str, data[name])))
    shown: list[RenderableType] = [fields]
    if data["errors"]:
        errors = Table(
            box=box.SIMPLE_HEAD, title="Errors", title_justify="left", pad_edge=False,
            show_edge=False,
        )  # fmt: skip
        errors.add_column("attempt", justify="right", no_wrap=True)
        errors.add_column("at", no_wrap=True)
        errors.add_column("error", overflow="fold")
        for error in data["errors"]:
            text = _error(error)
            if error.get("traceback"):
                text += "\n" + escape(str(error["traceback"]).rstrip())
            errors.add_row(str(error.get("attempt", "")), _when(error.get("at") or None), text)
        shown.append(errors)
    shown.extend(_journal(data.get("journal")))
    return shown


def _journal(journal: dict[str, Any] | None) -> list[RenderableType]:
    """The steps a body stored and the signals sent to the job (``disclosure.journal``)."""
    if not journal or not (journal["steps"] or journal["signals"]):
        return []
    hidden = journal["payload_hidden"]
    table = Table(box=box.SIMPLE_HEAD, title="Steps and signals", title_justify="left",
                  pad_edge=False, show_edge=False)  # fmt: skip
    table.add_column("kind", no_wrap=True)
    table.add_column("name", overflow="fold")
    table.add_column("value", overflow="fold")
    for step in journal["steps"]:
        if step["kind"] == "step":
            value = _HIDDEN if hidden else escape(json.dumps(step["result"]))
        elif step["kind"] == "sleep":
            value = escape(f"until {_when(step['wakes_at'])}")
        else:
            value = escape(f"signal {step['signal']!r}, " + ("answered" if step["result"]
                                                             else "waiting"))  # fmt: skip
        table.add_row(step["kind"], escape(step["name"]), value)
    for signal in journal["signals"]:
        payload = _HIDDEN if hidden else escape(json.dumps(signal["payload"]))
        state = "delivered" if signal["delivered_at"] else "kept"
        table.add_row(f"signal ({state})", escape(signal["name"]), payload)
    return [table]


_HIDDEN = "[dim](hidden: needs django_workqueue.view_job_payload)[/dim]"

_SCALARS = (
    "id", "task", "queue", "status", "priority", "attempt_summary", "attempt", "max_attempts",
    "crashes_charged", "enqueued_at",
    "run_after", "started_at", "finished_at", "deadline", "workflow", "unique_key", "flow_key",
    "lease_owner", "lease_expires_at", "cancel_requested_at",
)  # fmt: skip


_TIMES = frozenset(
    name for name in _SCALARS if name.endswith(("_at", "_after")) or name == "deadline"
)


def _progress(progress: dict[str, Any]) -> str:
    text = f"{progress['current']}" if progress["current"] is not None else ""
    if progress["total"] is not None:
        text += f"/{progress['total']}"
    if progress["message"]:
        text += f" {progress['message']}"
    if progress["details"]:
        text += f" {json.dumps(progress['details'])}"
    return text.strip()


@contextmanager
def progress_bar(stream: Stream, description: str, total: int | None) -> Iterator[Any]:
    """A progress bar on ``stream`` (stderr) when it is a terminal; yields ``advance(n)``."""
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console(stream), transient=True, disable=not stream.isatty(),
    )  # fmt: skip
    with bar:
        task_id = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task_id, n)
