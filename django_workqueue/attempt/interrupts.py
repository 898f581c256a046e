"""A Ctrl-C of this process told apart from a body's own ``raise KeyboardInterrupt``.

A body's ``KeyboardInterrupt`` is the body's failure (``ending.py``). But a runner on the main
thread (``drain()`` in a test run, skip-queue in a management command) also receives the
process's SIGINT as a ``KeyboardInterrupt`` raised wherever the body happens to be, and that
one is the user stopping the process: it must reach them, not fail the job. So while a body
runs on the main thread under Python's default SIGINT handler, ``watched`` puts a handler in
its place that notes the signal before raising as the default one does; ``of_the_body`` then
tells the two apart. Elsewhere nothing is installed and every exception is the body's: slot
threads never receive signals, ``runworker`` turns SIGINT into a graceful stop, and a process
pool's child ignores SIGINT.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_received = False  # set on the main thread only, by a SIGINT while a body runs there


def _note_interrupt(signum: int, frame: FrameType | None) -> None:
    global _received
    _received = True
    signal.default_int_handler(signum, frame)


class watched:
    """Note a SIGINT received while the block runs (on the main thread, where Python's default
    handler is in place; a nested block shares the outer one's watch).

    A class rather than a generator: every attempt enters one, and on a slot thread (the
    common case) it does nothing but look at which thread it is on.
    """

    __slots__ = ("_install",)

    def __enter__(self) -> None:
        global _received
        self._install = False
        if threading.current_thread() is threading.main_thread():
            handler = signal.getsignal(signal.SIGINT)
            self._install = handler is signal.default_int_handler
            if handler is not _note_interrupt:  # not inside another watch: a fresh one
                _received = False
            if self._install:
                signal.signal(signal.SIGINT, _note_interrupt)

    def __exit__(self, *exc: object) -> None:
        if self._install:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def of_the_body(exc: BaseException) -> bool:
    """Whether ``exc``, raised while a body ran under ``watched``, is the body's ending: all
    but the ``KeyboardInterrupt`` of a SIGINT this process received meanwhile."""
    return not (
        isinstance(exc, KeyboardInterrupt)
        and _received
        and threading.current_thread() is threading.main_thread()
    )
