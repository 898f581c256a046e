"""runworker's SIGTERM/SIGINT handling cannot deadlock the control loop it interrupts."""

from __future__ import annotations

import io
import os
import signal
import time

import pytest
from django.core.management import call_command

from django_workqueue.management.commands import runworker
from django_workqueue.worker.runner import Worker

pytestmark = pytest.mark.django_db


@pytest.mark.timeout(60)
def test_a_signal_while_the_control_loop_holds_its_wake_up_lock_still_drains(monkeypatch):
    """Python runs a signal handler on the main thread, the control loop's, between two of its
    bytecodes: possibly inside ``wake.clear()``, holding the event's lock that stopping the
    worker takes. A handler that stopped the worker itself would wait for that lock forever
    (a worker that hangs after ``SIGTERM: draining``); runworker's hands the signal to a thread
    of its own, which gets the lock once the loop lets go of it."""
    seen: dict[str, bool] = {}

    def run(self: Worker) -> int:
        with self.wake._cond:  # as in wake.clear() or wake.set(), the loop's own calls
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the handler runs here, with the lock held
        seen["stopped"] = self.stopping.wait(20)
        return 0

    before = signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(runworker.Worker, "run", run)
    stderr = io.StringIO()
    monkeypatch.setattr(runworker.sys, "stderr", stderr)

    call_command("runworker", "--concurrency", "1", stdout=io.StringIO())

    assert seen == {"stopped": True}
    assert "SIGTERM: draining" in stderr.getvalue()
    assert signal.getsignal(signal.SIGTERM) is before  # the test's own handler is back
