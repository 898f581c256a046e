"""The job state machine: one table of allowed transitions, checked by ``transition()``.

The edges themselves are not copied here (a copy only proves that two lists were edited
together); what is tested is how ``transition()`` and ``can_transition()`` use the table, and
the properties the design asks of it.
"""

from __future__ import annotations

import itertools

import pytest

from django_workqueue.states import (
    ACTIVE,
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    Status,
    can_transition,
    transition,
)

ALLOWED = sorted((source, target) for source in Status for target in TRANSITIONS[source])
MISSING = [pair for pair in itertools.product(Status, repeat=2) if pair not in ALLOWED]


def test_every_status_has_a_row_in_the_table():
    assert set(TRANSITIONS) == set(Status)


@pytest.mark.parametrize(("source", "target"), ALLOWED)
def test_transition_returns_the_allowed_target(source, target):
    assert transition(source, target) == (target,)


@pytest.mark.parametrize(("source", "target"), MISSING)
def test_transition_raises_on_an_edge_missing_from_the_table(source, target):
    with pytest.raises(IllegalTransition, match=f"{source} -> {target} is not an allowed"):
        transition(source, target)


def test_transition_checks_every_target_and_returns_them_in_order():
    assert transition(Status.RUNNING, Status.SUCCEEDED, Status.READY) == (
        Status.SUCCEEDED,
        Status.READY,
    )
    with pytest.raises(IllegalTransition, match="running -> blocked"):
        transition(Status.RUNNING, Status.SUCCEEDED, Status.BLOCKED)


def test_transition_with_no_target_is_an_empty_check():
    assert transition(Status.SUCCEEDED) == ()


def test_can_transition_rejects_unknown_status_words():
    with pytest.raises(ValueError):
        can_transition("queued", "running")
    with pytest.raises(ValueError):
        can_transition("ready", "done")


def test_terminal_and_active_split_the_statuses():
    assert not TERMINAL & ACTIVE
    assert set(Status) == TERMINAL | ACTIVE


def test_terminal_statuses_are_left_only_by_redrive_and_the_resumption_it_causes():
    leaving = {(s, t) for s in TERMINAL for t in TRANSITIONS[s]}
    assert leaving == {
        (Status.FAILED, Status.READY),
        (Status.FAILED, Status.BLOCKED),
        (Status.CANCELLED, Status.BLOCKED),
    }


def test_every_waiting_status_can_be_finished_from_outside_a_worker():
    waiting = ACTIVE - {Status.RUNNING}
    for target in (Status.SUCCEEDED, Status.FAILED):
        assert {s for s in Status if can_transition(s, target)} == waiting | {Status.RUNNING}


def test_every_active_status_can_be_cancelled():
    assert all(can_transition(s, Status.CANCELLED) for s in ACTIVE)


def test_only_ready_jobs_can_be_claimed():
    assert {s for s in Status if can_transition(s, Status.RUNNING)} == {Status.READY}
