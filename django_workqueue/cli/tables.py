"""The terminal rendering of ``reports``' data with ``rich``: tables that fit the terminal's
width (long columns are cut with an ellipsis, never wrapped), colour only on a terminal, and the
progress bar of long operations (on stderr, only when it is a terminal, so that piped output
stays clean)."""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any, Protocol, cast

from rich import box
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .reports import STATUSES

_STATUS_STYLES = {
    "failed": "red", "cancelled": "yellow", "succeeded": "green", "running": "cyan",
    "held": "magenta",
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


def show(stream: Stream, renderables: list[RenderableType]) -> None:
    """Print ``renderables``; off a terminal as plain text without trailing blanks (what
    scripts and golden files compare)."""
    if stream.isatty():
        out = console(stream)
        for n, renderable in enumerate(renderables):
            out.print(*([""] if n else []), renderable, sep="\n")
        return
    buffer = io.StringIO()
    plain = Console(
        file=buffer, width=_width(False), no_color=True, color_system=None, highlight=False,
        soft_wrap=False,
    )  # fmt: skip
    for n, renderable in enumerate(renderables):
        plain.print(*([""] if n else []), renderable, sep="\n")
    stream.write("\n".join(line.rstrip() for line in buffer.getvalue().splitlines()))


def dump(stream: Stream, data: Any) -> None:
    """``--json``: one JSON document on stdout."""
    stream.write(json.dumps(data, indent=2, sort_keys=False, default=str))


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(
        box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, show_edge=False
    )
    for name in columns:
        table.add_column(name, no_wrap=True, overflow="ellipsis")
    return table


def _when(value: str | None) -> str:
    """An ISO timestamp as ``YYYY-MM-DD hh:mm:ss`` (UTC)."""
    return "" if value is None else value[:19].replace("T", " ")


def _status(value: str) -> str:
    style = _STATUS_STYLES.get(value)
    return f"[{style}]{value}[/]" if style else value


def status(data: dict[str, Any]) -> list[RenderableType]:
    jobs = _table("queue", *STATUSES, title="Jobs by queue and status")
    for column in jobs.columns[1:]:
        column.justify = "right"
    for queue in data["queues"]:
        name = queue["name"] + (" (paused)" if queue["paused"] else "")
        jobs.add_row(name, *(str(queue["counts"][s]) for s in STATUSES))
    jobs.add_section()
    jobs.add_row("total", *(str(data["totals"][s]) for s in STATUSES))
    return [jobs, *workers(data["workers"])]


def workers(rows: list[dict[str, Any]]) -> list[RenderableType]:
    if not rows:
        return ["No live workers."]
    table = _table("worker", "host", "pid", "queues", "slots", "running", "started", "last seen",
                   title="Workers")  # fmt: skip
    for row in rows:
        slots = str(row["slots"])
        if row["slots_range"]:
            slots += " ({}-{})".format(*row["slots_range"])
        table.add_row(
            row["id"], row["host"], str(row["pid"]), ",".join(row["queues"]), slots,
            str(row["running"]), _when(row["started_at"]), _when(row["last_seen_at"]),
        )  # fmt: skip
    return [table]


def jobs(rows: list[dict[str, Any]], limit: int) -> list[RenderableType]:
    if not rows:
        return ["No jobs match."]
    table = _table("id", "task", "queue", "status", "attempt", "since", "last error")
    # The short columns keep their width; the task and the error give way (with an ellipsis).
    widths = (max(2, len(str(rows[0]["id"]))), 12, 7, 9, 7, 19, 12)
    for column, width in zip(table.columns, widths, strict=True):
        column.min_width = width
    table.columns[0].justify = "right"
    for row in rows:
        table.add_row(
            str(row["id"]), row["task"], row["queue"], _status(row["status"]),
            f"{row['attempt']}/{row['max_attempts']}", _when(since(row)),
            _error(row["last_error"]),
        )  # fmt: skip
    shown: list[RenderableType] = [table]
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
    return shown


_HIDDEN = "[dim](hidden: needs django_workqueue.view_job_payload)[/dim]"

_SCALARS = (
    "id", "task", "queue", "status", "priority", "attempt", "max_attempts", "enqueued_at",
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
