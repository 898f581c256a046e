"""The claim-ahead buffer (``worker/ahead.py``): its bound, what a take records as begun, and
what a failed write and a shutdown give back."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from django_workqueue.worker.ahead import AheadBuffer, claim_ahead_problem


def handed(pk: int, attempt: int = 1) -> Any:
    return (SimpleNamespace(id=pk, attempt=attempt), SimpleNamespace(started=0.0))


def test_the_bound_is_per_slot_rounded_up_and_counts_what_waits():
    buffer = AheadBuffer(0.5)
    assert buffer.room(3) == 2
    buffer.put([handed(1)])
    assert buffer.room(3) == 1
    buffer.put([handed(2), handed(3)])
    assert buffer.room(3) == 0  # never negative, however the slots shrank
    assert AheadBuffer(0).room(8) == 0 and not AheadBuffer(0).enabled


def test_a_take_is_first_in_first_out_and_recorded_as_begun_once():
    buffer = AheadBuffer(1)
    buffer.put([handed(1), handed(2, attempt=3)])

    assert buffer.take()[0].id == 1
    assert buffer.take()[0].id == 2
    assert buffer.take() is None
    assert buffer.taken() == [(1, 1), (2, 3)]
    assert buffer.taken() == []
    assert buffer.total == 2


def test_a_failed_write_puts_handed_jobs_back_first_and_keeps_the_slots_takes():
    buffer = AheadBuffer(1)
    buffer.put([handed(1), handed(2), handed(3)])
    by_slot = buffer.take()
    for_slots = [buffer.take()]
    taken = buffer.taken()

    buffer.put_back(for_slots, taken)

    assert buffer.take()[0].id == 2  # waits again, first
    assert buffer.taken() == [(by_slot[0].id, 1), (2, 1)]


def test_close_returns_what_no_slot_took_and_stops_takes():
    buffer = AheadBuffer(1)
    buffer.put([handed(1), handed(2)])
    buffer.take()

    assert [job.id for job, _ in buffer.close()] == [2]
    buffer.put([handed(3)])  # a claim of the pass that saw the stop: still no take
    assert buffer.take() is None


@pytest.mark.parametrize("value", [0, 1, 0.5, 4])
def test_numbers_from_0_to_4_are_valid(value):
    assert claim_ahead_problem(value) is None


@pytest.mark.parametrize("value", [-1, 4.01, "1", True, None, float("nan")])
def test_anything_else_is_refused_with_the_range(value):
    assert "0" in claim_ahead_problem(value) and "4" in claim_ahead_problem(value)
