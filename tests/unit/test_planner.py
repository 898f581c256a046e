"""The worker's claim planner (``worker/planner.py``) on its own: when a pass claims, how far
ahead it claims, and what a slot takes from the buffer (no database: fakes for the rest)."""

from __future__ import annotations

import math
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from django_workqueue.attempt.lease import RunningJob
from django_workqueue.db import ClaimedJob
from django_workqueue.worker.ahead import AheadBuffer
from django_workqueue.worker.ledger import Ledger
from django_workqueue.worker.planner import DEFERRED_PASS_SECONDS, ClaimPlanner


@dataclass
class FakeContext:
    attempt: int = 1
    lease_lost: bool = False


@dataclass
class FakeClaimer:
    held: bool = False
    retry_at: float | None = None


@dataclass
class FakeBatches:
    due: float = math.inf

    def wake_at(self) -> float:
        return self.due


@dataclass
class FakeBackpressure:
    until: float = math.inf

    def paused_until(self, now: float) -> float:
        return self.until


@dataclass
class FakeDriver:
    answers: list[Any] = field(default_factory=list)
    asked: list[int] = field(default_factory=list)

    def claim(self, queues: Any, limit: int, owner: str, *, ahead: bool = False) -> Any:
        assert ahead
        self.asked.append(limit)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class FakePool:
    def __init__(self) -> None:
        self.began_queues: list[str] = []

    def began(self, queue_name: str) -> None:
        self.began_queues.append(queue_name)


def planner(**options: Any) -> ClaimPlanner:
    parts: dict[str, Any] = dict(
        ledger=Ledger(), pool=FakePool(), ahead=AheadBuffer(1), batches=FakeBatches(),
        claimer=FakeClaimer(), backpressure=FakeBackpressure(), leases=None,
        inbox=queue.SimpleQueue(), stopping=threading.Event(), wake=threading.Event(),
        slots=lambda: 2, children_ready=lambda: True, listening=lambda: False,
        promote=lambda: 0, when_committed=lambda start: start(),
        in_pass=lambda: False,
        on_progress=lambda context: None, poll_interval=1.0,
    )  # fmt: skip
    driver = options.pop("driver", FakeDriver())
    parts.update(options)
    return ClaimPlanner(driver, "w", ["default"], **parts)


def job(pk: int) -> ClaimedJob:
    return ClaimedJob(pk, "t", "default", 0, 1, 3, 0, 60, None, False, "[[1], {}]")


def ids(jobs: list[ClaimedJob]) -> list[int]:
    return [each.id for each in jobs]


def test_a_pass_claims_when_woken_or_when_a_poll_batch_pause_or_rate_limit_is_due() -> None:
    plan = planner()
    plan.last_poll = 100.0
    assert plan.claims_due(100.5)  # the first pass
    plan.poll_now = False
    assert not plan.claims_due(100.5)
    assert plan.claims_due(101.0)  # the poll interval ran out
    for later in (
        {"batches": FakeBatches(due=100.2)},
        {"backpressure": FakeBackpressure(until=100.2)},
        {"claimer": FakeClaimer(retry_at=100.2)},
    ):
        other = planner(**later)
        other.poll_now, other.last_poll = False, 100.0
        assert not other.claims_due(100.1), later
        # Set before the sleep: a rate limit that has run out no longer shows, this does.
        other.claim_deadline = other.claim_due_at(100.1)
        assert other.claims_due(100.3), later
    assert planner(burst=True, poll_interval=1e9).claims_due(0.0)


def test_listening_polls_at_the_listen_interval_unless_a_flow_limit_holds_jobs_back() -> None:
    listening = planner(listening=lambda: True)
    listening.last_poll, listening.poll_jitter = 100.0, 1.25
    assert listening.next_poll() > 101.0  # LISTEN_POLL_INTERVAL (jittered), not the poll's
    held = planner(listening=lambda: True, claimer=FakeClaimer(held=True))
    held.last_poll = 100.0
    assert held.next_poll() == 101.0


def test_a_claim_ahead_needs_a_full_claim_and_stays_within_max_jobs() -> None:
    driver = FakeDriver(answers=[[job(1)], [job(2), job(3)]])
    plan = planner(driver=driver, max_jobs=10)
    assert plan.claim_ahead(4, full=False) == [] and not plan.backlog and driver.asked == []
    plan.ledger.claimed_count, plan.last_fill = 5, (2, 2)
    assert ids(plan.claim_ahead(4, full=True)) == [1]  # room 4, but 3 left of max_jobs
    assert driver.asked == [3] and not plan.backlog  # it came back short
    assert ids(plan.claim_ahead(2, full=True)) == [2, 3] and plan.backlog


def test_a_failed_claim_ahead_runs_the_jobs_claimed_for_the_free_slots() -> None:
    plan = planner(driver=FakeDriver(answers=[RuntimeError("no"), RuntimeError("no")]))
    plan.last_fill = (2, 2)
    assert plan.claim_ahead(2, full=True) == []
    plan.last_fill = (2, 0)
    with pytest.raises(RuntimeError):
        plan.claim_ahead(2, full=True)


def test_a_slot_takes_a_buffered_job_unless_stopping_and_never_one_whose_lease_was_lost() -> None:
    plan = planner()
    lost, kept = RunningJob(FakeContext(lease_lost=True)), RunningJob(FakeContext())  # type: ignore[arg-type]
    with plan.ledger.lock:
        plan.ledger.lease(1, lost)
        plan.ledger.lease(2, kept)
    plan.ahead.put([(job(1), lost), (job(2), kept)])
    plan.stopping.set()
    assert plan.take() is None
    plan.stopping.clear()
    taken = plan.take()
    assert taken is not None and taken[0].id == 2 and taken[1] is kept
    assert plan.ledger.ids() == {2}  # the lost one is forgotten, not run
    assert plan.ledger.executing == 1 and plan.pool.began_queues == ["default"]  # type: ignore[attr-defined]
    assert plan.wake.is_set() and plan.take() is None


def test_a_freed_slot_taking_from_a_buffer_above_half_wakes_the_control_thread_once_per_pass():
    """Under a backlog a pass comes soon anyway (the control thread sleeps at most
    DEFERRED_PASS_SECONDS while takes wait for their write): a slot that ran a job and takes
    its next from the buffer does not wake it; the take that leaves the buffer at half its
    bound (4 of 8) does, and so does any take while the control thread sleeps long."""
    plan = planner(ahead=AheadBuffer(4))  # 2 slots: a bound of 8
    items = [RunningJob(FakeContext()) for _ in range(8)]  # type: ignore[arg-type]
    with plan.ledger.lock:
        for pk, item in enumerate(items, 1):
            plan.ledger.lease(pk, item)
    plan.ahead.put([(job(pk), item) for pk, item in enumerate(items, 1)])

    def woke(**how: bool) -> bool:
        plan.wake.clear()
        assert plan.take(**how) is not None
        return plan.wake.is_set()

    assert plan.deferred_pass_due(100.0) == math.inf  # nothing waits for a pass: a long sleep
    assert woke(freed=True)  # so the take wakes it (7 left)
    assert plan.deferred_pass_due(100.0) == 100.0 + DEFERRED_PASS_SECONDS  # a take waits
    assert [woke(freed=True), woke(freed=True)] == [False, False]  # 6, 5 left
    assert woke()  # not after a job of its own (a slot's first, or after a batch): 4 left
    plan.deferred_pass_due(100.0)
    assert woke(freed=True)  # 3 left: the buffer runs low, the pass refills it
    plan.ahead.taken()  # the pass wrote the takes...
    plan.took = False  # ...none since: quiet
    assert plan.deferred_pass_due(100.0) == math.inf and not plan.deferring


class OrderedPass:
    """The parts a pass's claim step calls, each noting its call in ``steps``."""

    def __init__(self) -> None:
        self.steps: list[tuple[Any, ...]] = []
        self.idle = True

    # Batches
    def fill(self, slots: int) -> int:
        self.steps.append(("read batches", slots))
        return 0

    def wake_at(self) -> float:
        return math.inf

    # Claimer
    held = False
    retry_at = None

    def begin_pass(self) -> None:
        pass

    def claim(self, queues: Any, limit: int) -> list[ClaimedJob]:
        self.steps.append(("claim", limit))
        return [job(1)]

    # SlotPool
    def claims(self, queues: Any, limit: int) -> list[tuple[Any, int]]:
        return [(queues, limit)] if limit > 0 else []

    # Backpressure
    def may_claim(self, **counts: int) -> bool:
        return True

    def start(self, jobs: list[ClaimedJob], ahead: list[ClaimedJob]) -> None:
        self.steps.append(("start", ids(jobs)))


def test_with_slots_to_spare_the_plain_jobs_start_before_the_batches_are_read() -> None:
    # Issue 32 (pickup): a job a NOTIFY announced starts without waiting on the batch read.
    # Under load the due batches still take their slots first.
    parts = OrderedPass()
    plan = planner(
        batches=parts, claimer=parts, pool=parts, backpressure=parts, ahead=AheadBuffer(0),
    )  # fmt: skip
    plan.start_jobs = parts.start  # type: ignore[method-assign]
    assert plan.fill() == 1
    assert parts.steps == [("claim", 2), ("start", [1]), ("read batches", 1)]
    parts.steps.clear()
    plan.backlog = plan.poll_now = True  # the last claim came back full
    assert plan.fill() == 1
    assert parts.steps == [("read batches", 2), ("claim", 2), ("start", [1])]
