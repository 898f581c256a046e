"""runworker's SIGTERM/SIGINT handling cannot deadlock the control loop it interrupts."""

from __future__ import annotations

import io
import os
import signal
import time

import pytest
from django.core.management import call_command

from django_workqueue.management.commands import runworker
from django_workqueue.worker import stop_signals
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
    monkeypatch.setattr(stop_signals.sys, "stderr", stderr)

    call_command("runworker", "--concurrency", "1", stdout=io.StringIO())

    assert seen == {"stopped": True}
    assert "SIGTERM: draining" in stderr.getvalue()
    assert signal.getsignal(signal.SIGTERM) is before  # the test's own handler is back


@pytest.mark.timeout(60)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_process_a_job_forks_ends_on_sigterm_without_stopping_the_worker(monkeypatch):
    """A job that forks (``multiprocessing``'s default on Linux, whose ``Pool`` SIGTERMs its
    children on exit) hands its children runworker's handler and pipe: a SIGTERM to such a
    child ends the child, as it would have without runworker, and does not stop the worker."""
    seen: dict[str, object] = {}

    def run(self: Worker) -> int:
        pid = os.fork()
        if pid == 0:  # the job's child
            os.kill(os.getpid(), signal.SIGTERM)
            os._exit(0)  # not reached: the signal ends it
        _, status = os.waitpid(pid, 0)
        seen["child"] = os.waitstatus_to_exitcode(status)
        seen["stopping"] = self.stopping.wait(1)  # what the child's signal would have done
        return 0

    monkeypatch.setattr(runworker.Worker, "run", run)

    call_command("runworker", "--concurrency", "1", stdout=io.StringIO())

    assert seen == {"child": -signal.SIGTERM, "stopping": False}


@pytest.mark.timeout(60)
def test_a_signal_while_starting_whose_exit_python_swallowed_still_ends_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before the worker exists a signal ends the process (``SystemExit(0)`` from the handler).
    Python runs handlers between any two bytecodes, also inside a callback whose exceptions it
    only prints ("Exception ignored in ..."): an import lock's, seen in the fault battery, where
    the worker then started and ran as if never stopped. The command still exits 0 before it
    builds the worker."""
    built: list[object] = []
    monkeypatch.setattr(runworker, "Worker", lambda **options: built.append(options))
    stderr = io.StringIO()
    monkeypatch.setattr(stop_signals.sys, "stderr", stderr)
    real_for_command = stop_signals.for_command

    def for_command() -> stop_signals.StopSignals:
        signals = real_for_command()
        try:  # the signal arrives inside a callback that swallows what its handler raises
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
        except SystemExit:
            pass
        return signals

    monkeypatch.setattr(stop_signals, "for_command", for_command)
    before = signal.getsignal(signal.SIGTERM)

    with pytest.raises(SystemExit) as exited:
        call_command("runworker", "--concurrency", "1", stdout=io.StringIO())

    assert exited.value.code == 0
    assert built == []  # no worker was built, no job claimed
    assert signal.getsignal(signal.SIGTERM) is before
