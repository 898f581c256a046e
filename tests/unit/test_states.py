"""The job state machine: one table of allowed transitions, checked by ``transition()``."""

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

# The design's edges, written out independently of states.py so that a change to the table
# has to be made on purpose in both places.
ALLOWED = {
    ("blocked", "ready"),
    ("blocked", "scheduled"),
    ("blocked", "cancelled"),
    ("scheduled", "ready"),  # the promoter, once run_after has come; an operator's retry
    ("scheduled", "cancelled"),
    ("ready", "running"),
    ("ready", "cancelled"),
    ("running", "succeeded"),
    ("running", "failed"),
    ("running", "cancelled"),
    ("running", "ready"),  # reaped lease, graceful-shutdown release, retry without delay
    ("running", "scheduled"),  # retry or snooze with a delay
    ("failed", "ready"),  # redrive out of the dead-letter queue
}
ALL_PAIRS = list(itertools.product([s.value for s in Status], repeat=2))


def test_statuses_are_the_lowercase_words_stored_in_the_database():
    assert [s.value for s in Status] == [
        "blocked",
        "scheduled",
        "ready",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    ]


def test_every_status_has_a_row_in_the_table():
    assert set(TRANSITIONS) == set(Status)


@pytest.mark.parametrize(("source", "target"), ALL_PAIRS)
def test_can_transition_matches_the_design(source, target):
    assert can_transition(source, target) is ((source, target) in ALLOWED)


@pytest.mark.parametrize(("source", "target"), sorted(ALLOWED))
def test_transition_returns_the_allowed_target(source, target):
    assert transition(Status(source), Status(target)) == (Status(target),)


@pytest.mark.parametrize(("source", "target"), [pair for pair in ALL_PAIRS if pair not in ALLOWED])
def test_transition_raises_on_an_edge_missing_from_the_table(source, target):
    with pytest.raises(IllegalTransition, match=f"{source} -> {target} is not an allowed"):
        transition(Status(source), Status(target))


def test_transition_checks_every_target_and_returns_them_in_order():
    assert transition(Status.RUNNING, Status.SUCCEEDED, Status.READY) == (
        Status.SUCCEEDED,
        Status.READY,
    )
    with pytest.raises(IllegalTransition, match="running -> blocked"):
        transition(Status.RUNNING, Status.SUCCEEDED, Status.BLOCKED)


def test_transition_with_no_target_is_an_empty_check():
    assert transition(Status.SUCCEEDED) == ()


def test_illegal_transition_is_a_runtime_error():
    assert issubclass(IllegalTransition, RuntimeError)


def test_can_transition_rejects_unknown_status_words():
    with pytest.raises(ValueError):
        can_transition("queued", "running")
    with pytest.raises(ValueError):
        can_transition("ready", "done")


def test_terminal_and_active_split_the_statuses():
    assert {Status.SUCCEEDED, Status.FAILED, Status.CANCELLED} == TERMINAL
    assert {Status.BLOCKED, Status.SCHEDULED, Status.READY, Status.RUNNING} == ACTIVE
    assert not TERMINAL & ACTIVE
    assert set(Status) == TERMINAL | ACTIVE


def test_only_failed_leaves_a_terminal_status_and_only_by_redrive():
    leaving = {(s, t) for s in TERMINAL for t in TRANSITIONS[s]}
    assert leaving == {(Status.FAILED, Status.READY)}


def test_every_active_status_can_be_cancelled():
    assert all(can_transition(s, Status.CANCELLED) for s in ACTIVE)


def test_only_ready_jobs_can_be_claimed():
    assert {s for s in Status if can_transition(s, Status.RUNNING)} == {Status.READY}
