"""How ``runworker`` answers SIGTERM and SIGINT, from as early in the process as it can.

A ``manage.py runworker`` process installs these handlers when Django creates django_workqueue's
app config (``install_early``, the first thing ``django.setup()`` does after reading the
settings, before any model, task module or URLconf is imported); the command adopts them
(``for_command``), so that a worker stopped while it starts (the imports, Django's checks, the
wait for the database) exits 0 instead of dying of the signal (-15), which supervisors report as
a crash. Until the worker exists there is nothing to drain: the first signal ends the process at
once, cleanly (``SystemExit(0)``). From just before the worker is built (``drain_from_now``),
the first signal drains it and a second exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any, Protocol

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Stoppable(Protocol):
    def stop(self) -> None: ...


class StopSignals:
    """SIGTERM/SIGINT handlers for one ``runworker`` run: ``install()``, ``drain_from_now()``
    when draining becomes possible, ``attach(worker)``, and ``restore()`` at the end."""

    def __init__(self) -> None:
        self.stopped = threading.Event()  # set by the first signal once draining
        self.draining = False
        self.stopped_while_starting = False  # a plain flag: a handler takes no lock
        self._worker: Stoppable | None = None
        self._seen = 0
        self._owner = os.getpid()
        self._previous: dict[int, Any] = {}
        self._read, self._write = -1, -1

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> None:
        # A signal handler runs in the main thread between two of its bytecodes, possibly while
        # it holds a lock that stopping takes (an Event's: the control loop sets and clears its
        # wake-up event all the time), and would wait for it forever. Once draining, the
        # handler only writes the signal to a pipe; a thread of its own does the rest.
        self._read, self._write = os.pipe()
        threading.Thread(
            target=self._on_first_signal, name="workqueue-signals", daemon=True
        ).start()
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def drain_from_now(self) -> None:
        """From now on a signal drains (the worker about to be built may hold jobs). A signal
        that came while starting ends the process here if its ``SystemExit`` was lost: raised
        inside a callback whose exceptions Python ignores (an import lock's, a weakref's, a
        ``__del__``), it is printed as "Exception ignored" and the start-up goes on."""
        if self.stopped_while_starting:
            raise SystemExit(0)
        self.draining = True

    def attach(self, worker: Stoppable) -> None:
        self._worker = worker
        if self.stopped.is_set():  # a signal arrived while the worker was being built
            worker.stop()

    def restore(self) -> None:
        """Leave the signals as they were (``call_command`` in tests runs in-process)."""
        for signum, handler in self._previous.items():  # None: not set from Python
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()
        if self._write >= 0:
            os.close(self._write)  # the signal thread reads the end and closes its side
            self._write = -1

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._owner:
            # A process a job forked (multiprocessing's default on Linux) inherits this handler
            # and the pipe: it must not stop the worker, but end as it would have.
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self._seen += 1
        if not self.draining:
            self.stopped_while_starting = True
            name = signal.Signals(signum).name.encode()
            os.write(2, name + b": stopped while starting, before the first claim\n")
            raise SystemExit(0)
        if self._seen > 1:
            os.write(2, b"second signal: exiting now; leases will expire and be reaped\n")
            os._exit(1)
        os.write(self._write, bytes([signum]))

    def _on_first_signal(self) -> None:
        with open(self._read, "rb") as pipe:  # closed on return
            received = pipe.read(1)
        if not received:  # the command returned: its end of the pipe is closed
            return
        with contextlib.suppress(Exception):  # no stderr (a daemon): stopped all the same
            name = signal.Signals(received[0]).name
            sys.stderr.write(f"{name}: draining (signal again to exit at once)\n")
        self.stopped.set()
        if self._worker is not None:
            self._worker.stop()


_early: StopSignals | None = None


def install_early(argv: list[str]) -> None:
    """Install the handlers now if this process is ``manage.py runworker`` (``argv[1]``)."""
    global _early
    if _early is None and len(argv) > 1 and argv[1] == "runworker":
        _early = StopSignals()
        _early.install()


def for_command() -> StopSignals:
    """The handlers ``install_early`` installed, or new ones (``call_command``, tests)."""
    global _early
    signals, _early = _early, None
    if signals is None or not signals.installed:
        signals = StopSignals()
        signals.install()
    return signals
