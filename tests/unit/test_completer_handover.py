"""The completer's queue of outcomes is shared: slot threads hand outcomes over while the control
thread takes some back (at shutdown), and neither may lose or break the other."""

from __future__ import annotations

import sys
import threading

from django_workqueue.outcomes import Outcome, OutcomeKind
from django_workqueue.worker.completer import Completer


def outcome(job_id: int) -> Outcome:
    return Outcome(job_id=job_id, attempt=1, kind=OutcomeKind.SUCCEEDED, max_attempts=1)


def test_take_while_slots_hand_over_loses_nothing_and_keeps_order() -> None:
    completer = Completer(driver=None, owner="worker-a")  # type: ignore[arg-type]
    for job_id in range(5_000):
        completer.hand_over(outcome(job_id))
    handed = 5_000
    stop = threading.Event()

    def slot() -> None:
        nonlocal handed
        while not stop.is_set() and handed < 12_000:
            completer.hand_over(outcome(handed))
            handed += 1

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    thread = threading.Thread(target=slot)
    thread.start()
    taken: list[Outcome] = []
    try:
        for first in range(0, 2_000, 10):
            taken += completer.take(set(range(first, first + 10)))
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(previous)

    assert [o.job_id for o in taken] == list(range(2_000))
    left = [o.job_id for o in completer._outcomes]
    assert left == list(range(2_000, handed))  # the rest, in the order handed over
