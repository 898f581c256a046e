"""The worker's ledger (``worker/ledger.py``): which entry a job's end or a late outcome may
forget, and what a stale entry is told when its job is leased again."""

from __future__ import annotations

from dataclasses import dataclass, field

from django_workqueue.attempt.lease import RunningJob
from django_workqueue.context import AbortReason
from django_workqueue.outcomes import Outcome, OutcomeKind
from django_workqueue.worker.ledger import Ledger


@dataclass
class FakeContext:
    attempt: int = 1
    aborted: list[AbortReason] = field(default_factory=list)

    def abort(self, reason: AbortReason) -> bool:
        self.aborted.append(reason)
        return True


def entry(attempt: int = 1) -> RunningJob:
    return RunningJob(FakeContext(attempt))  # type: ignore[arg-type]


def ended(job_id: int, attempt: int) -> Outcome:
    return Outcome(job_id=job_id, attempt=attempt, kind=OutcomeKind.SUCCEEDED, max_attempts=3)


def test_leasing_a_held_job_again_tells_the_stale_entry_its_lease_was_lost() -> None:
    ledger = Ledger()
    first, second = entry(1), entry(2)
    with ledger.lock:
        ledger.lease(7, first)
        assert ledger.lease(7, second) is second
    assert first.context.aborted == [AbortReason.LEASE_LOST]  # type: ignore[attr-defined]
    assert second.context.aborted == []  # type: ignore[attr-defined]
    assert ledger.snapshot() == {7: second}


def test_forget_and_end_leave_a_later_attempts_entry_alone() -> None:
    ledger = Ledger()
    old, new = entry(1), entry(2)
    with ledger.lock:
        ledger.lease(7, new)
        ledger.forget(7, old)
        ledger.end(7, old)
    assert ledger.ids() == {7} and ledger.finished_count == 1
    with ledger.lock:
        ledger.end(7, new)
    assert len(ledger) == 0 and ledger.finished_count == 2


def test_forget_done_matches_the_attempt_and_counts_every_outcome() -> None:
    ledger = Ledger()
    with ledger.lock:
        ledger.lease(1, entry(1))
        ledger.lease(2, entry(2))
    ledger.forget_done([ended(1, 1), ended(2, 1), ended(3, 1)])  # 2: a later attempt is held
    assert ledger.ids() == {2} and ledger.finished_count == 3


def test_still_running_leaves_out_the_attempts_being_finished() -> None:
    ledger = Ledger()
    with ledger.lock:
        ledger.lease(1, entry(1))
        ledger.lease(2, entry(2))
        assert ledger.still_running(set()) == 2
        assert ledger.still_running({(1, 1), (2, 1)}) == 1  # job 2 holds attempt 2
