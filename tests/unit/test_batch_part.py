"""The worker's batch part (``worker/batch.py``) on its own: a claimed batch is leased into the
ledger and handed to the slots as one item; a slot that ran it hands its outcomes to the
completer, and a member without one is forgotten (no database: fakes for the rest)."""

from __future__ import annotations

import dataclasses
import queue
import threading
from typing import Any

import pytest

from django_workqueue import Task
from django_workqueue.db import ClaimedJob
from django_workqueue.outcomes import Outcome, OutcomeKind
from django_workqueue.worker import batch as batch_module
from django_workqueue.worker.batch import Batch, Batches
from django_workqueue.worker.ledger import Ledger
from testproject.testapp.tasks import batch_echo


class Leases:
    def __init__(self) -> None:
        self.scheduled: list[set[int]] = []

    def schedule(self, running: dict[int, Any], now: float) -> None:
        self.scheduled.append(set(running))


class Completer:
    def __init__(self) -> None:
        self.handed: list[Outcome] = []

    def hand_over(self, outcome: Outcome, started: float | None = None) -> None:
        self.handed.append(outcome)


def part(ledger: Ledger, starts: list[Any]) -> tuple[Batches, queue.SimpleQueue[Any], Any]:
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    completer = Completer()
    batches = Batches(
        None, "w", ["default"], ledger=ledger, inbox=inbox, leases=Leases(),  # type: ignore[arg-type]
        completer=completer, wake=threading.Event(), when_committed=starts.append,  # type: ignore[arg-type]
        generation=lambda: 0, event_loop=lambda: None,  # type: ignore[arg-type,return-value]
    )  # fmt: skip
    return batches, inbox, completer


def job(pk: int) -> ClaimedJob:
    return ClaimedJob(pk, "t", "default", 0, 1, 3, 0, 60, None, False, "[[1], {}]")


TASK = Task(dataclasses.replace(batch_echo.spec, name="b", batch_size=3, timeout=9.0))


def test_a_started_batch_is_leased_into_the_ledger_and_takes_one_slot() -> None:
    ledger = Ledger()
    batches, inbox, _ = part(ledger, [])
    batches._start([(TASK, [job(1), job(2)]), (TASK, [job(3)])], now=5.0)
    assert ledger.ids() == {1, 2, 3}
    assert (ledger.executing, ledger.claimed_count) == (2, 3)  # one slot per batch
    assert ledger.running[1].timeout == 9.0 and ledger.running[1].started == 5.0
    assert batches.leases.scheduled == [{1, 2, 3}]  # type: ignore[attr-defined]
    first, second = inbox.get_nowait(), inbox.get_nowait()
    assert [j.id for j, _ in first.members] == [1, 2] and len(second.members) == 1


def test_a_served_batch_hands_over_its_outcomes_and_forgets_a_member_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ledger = Ledger()
    batches, inbox, completer = part(ledger, [])
    batches._start([(TASK, [job(1), job(2)])], now=5.0)
    handed: Batch = inbox.get_nowait()
    done = Outcome(job_id=1, attempt=1, kind=OutcomeKind.SUCCEEDED, max_attempts=3)
    monkeypatch.setattr(batch_module, "run_batch", lambda *args: {1: done})
    monkeypatch.setattr(batch_module, "tidy_connections", lambda own=None: None)
    assert batches.serve(handed, generation=0) == 0
    assert completer.handed == [done] and ledger.running[1].context.finished
    assert ledger.ids() == {1}  # job 2: its lease runs out, the reaper retries it
    assert (ledger.executing, ledger.finished_count) == (0, 1)
    assert batches.wake.is_set()
