"""The per-job lines of a worker, written on a thread of their own.

Each written outcome gets one line on ``django_workqueue.jobs`` (``attempt/ending.py``). Made
and written on the control thread, between a pass's commit and the next pass, they cost the
drain a handler's work per job (about 10 µs on stdout) while the database and the slots wait.
Here the control thread only counts the endings and hands each pass's batch over; this thread
makes the lines, in the order the passes wrote them, while the control thread waits for the
database. ``flush`` waits for every line handed over so far (the worker's stop, before its
summary line); a worker killed outright loses the lines still waiting, never a row.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..attempt.ending import lines_enabled, log_lines

if TYPE_CHECKING:
    from ..db import Outcome

logger = logging.getLogger("django_workqueue.worker")

_Item = tuple[Sequence["Outcome"], Sequence[str]] | threading.Event | None


class LineWriter:
    """Writes the lines of written outcomes on a daemon thread, started by the first batch
    (thread-safe)."""

    def __init__(self, name: str = "workqueue-lines") -> None:
        self._name = name
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def write(self, outcomes: Sequence[Outcome], names: Sequence[str]) -> None:
        """Hand over the lines of ``outcomes`` (``names``: each one's ending); nothing when
        the job logger would write none."""
        if not outcomes or not lines_enabled():
            return
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                    self._thread.start()
        self._queue.put((outcomes, names))

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every line handed over so far is written (False: not within ``timeout``)."""
        if self._thread is None or not self._thread.is_alive():
            return True
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Write what is left, then end the thread."""
        self.flush(timeout)
        if self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            outcomes, names = item
            log_lines(outcomes, names, on_error=_lost)  # a failing handler loses that line


def _lost(outcome: Outcome, exc: Exception) -> None:
    logger.error("the worker could not write the line of job %s: %r", outcome.job_id, exc)
