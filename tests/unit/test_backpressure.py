"""Backpressure: the stats a hook sees, the claim gate that asks it, and ``adaptive_delay``'s AIMD
controller. Pure: stats objects are built by hand and every clock reading is passed in."""

from __future__ import annotations

import logging

import pytest

from django_workqueue.flow import WorkerStats, adaptive_delay
from django_workqueue.flow.backpressure import ERROR_PAUSE, Backpressure, RecentCounts
from django_workqueue.outcomes import OutcomeKind


def stats(succeeded: int = 0, failed: int = 0, **fields: object) -> WorkerStats:
    values: dict[str, object] = dict(
        worker_id="w", slots=4, busy=0, claimed=succeeded + failed, succeeded=succeeded,
        failed=failed, window_seconds=30.0, uptime_seconds=100.0,
    )  # fmt: skip
    values.update(fields)
    return WorkerStats(**values)  # type: ignore[arg-type]


FAILING = stats(succeeded=5, failed=5)  # 50 % failed
HEALTHY = stats(succeeded=10, failed=0)


# --- WorkerStats ---------------------------------------------------------------------------


def test_fail_rate_is_failures_over_finished_jobs():
    assert stats(succeeded=3, failed=1).fail_rate == 0.25
    assert stats(succeeded=3, failed=1).finished == 4


def test_fail_rate_is_zero_when_nothing_finished():
    assert stats().fail_rate == 0.0


# --- adaptive_delay ------------------------------------------------------------------------


def test_adaptive_delay_doubles_while_the_failure_rate_is_too_high():
    hook = adaptive_delay(max=100, max_fail_rate=0.2)

    assert [hook(FAILING) for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 16.0]


def test_adaptive_delay_never_exceeds_its_ceiling():
    hook = adaptive_delay(max=10, max_fail_rate=0.2)

    assert [hook(FAILING) for _ in range(7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_adaptive_delay_recovers_one_step_at_a_time_once_healthy():
    hook = adaptive_delay(max=10, max_fail_rate=0.2, step=2.0)
    for _ in range(6):
        hook(FAILING)  # at the ceiling: 10

    assert [hook(HEALTHY) for _ in range(6)] == [8.0, 6.0, 4.0, 2.0, 0.0, 0.0]


def test_adaptive_delay_backs_off_again_after_a_partial_recovery():
    hook = adaptive_delay(max=10, max_fail_rate=0.2)
    for _ in range(4):
        hook(FAILING)  # 8

    assert [hook(HEALTHY), hook(HEALTHY), hook(FAILING)] == [7.0, 6.0, 10.0]


def test_adaptive_delay_does_not_pause_at_or_below_the_failure_rate():
    hook = adaptive_delay(max=10, max_fail_rate=0.2)

    assert hook(stats(succeeded=8, failed=2)) == 0.0  # exactly 20 %: not above


def test_adaptive_delay_ignores_a_rate_over_too_few_jobs():
    """One failure out of one job is a 100 % rate, but says little."""
    hook = adaptive_delay(max=10, max_fail_rate=0.2, min_finished=5)

    assert hook(stats(failed=4)) == 0.0
    assert hook(stats(failed=5)) == 1.0


def test_adaptive_delays_keep_their_own_state():
    first, second = adaptive_delay(), adaptive_delay()
    first(FAILING)
    first(FAILING)

    assert (first(FAILING), second(FAILING)) == (4.0, 1.0)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max": 0}, "max must be seconds > 0, got 0"),
        ({"max": True}, "max must be seconds > 0, got True"),
        ({"max_fail_rate": 1.0}, "max_fail_rate must be a fraction from 0 up to 1, got 1.0"),
        ({"max_fail_rate": -0.1}, "max_fail_rate must be a fraction from 0 up to 1"),
        ({"step": 0}, "step must be seconds > 0, got 0"),
        ({"min_finished": 0}, "min_finished must be 1 or more, got 0"),
    ],
)
def test_adaptive_delay_rejects_options_it_cannot_use(options, message):
    with pytest.raises(ValueError, match=message):
        adaptive_delay(**options)


# --- RecentCounts --------------------------------------------------------------------------


def test_recent_counts_sum_what_happened_in_the_window():
    counts = RecentCounts(window=10)
    counts.add(100.2, claimed=3)
    counts.add_outcome(100.5, OutcomeKind.SUCCEEDED)
    counts.add_outcome(101.0, OutcomeKind.RETRY)
    counts.add_outcome(101.1, OutcomeKind.DISCARD)
    counts.add_outcome(101.2, OutcomeKind.SNOOZE)  # neither a success nor a failure

    assert counts.totals(102.0) == (3, 1, 2)


def test_recent_counts_forget_what_is_older_than_the_window():
    counts = RecentCounts(window=10)
    counts.add(100.0, claimed=1, succeeded=1)
    counts.add(105.0, claimed=2, failed=1)

    assert counts.totals(110.5) == (3, 1, 1)
    assert counts.totals(112.0) == (2, 0, 1)
    assert counts.totals(116.0) == (0, 0, 0)


# --- the claim gate ------------------------------------------------------------------------


class Hook:
    """A backpressure hook that returns the pauses it is given, in turn, and keeps its stats."""

    def __init__(self, *pauses: object) -> None:
        self.pauses = list(pauses)
        self.seen: list[WorkerStats] = []

    def __call__(self, stats: WorkerStats) -> object:
        self.seen.append(stats)
        pause = self.pauses.pop(0)
        if isinstance(pause, Exception):
            raise pause
        return pause


def test_without_a_hook_every_claim_goes_ahead():
    gate = Backpressure("w", None, window=30)

    assert gate.may_claim(slots=2, busy=0, now=1.0)
    assert gate.resume_at is None


def test_a_pause_holds_claims_until_it_has_run_out():
    hook = Hook(5.0, 0)
    gate = Backpressure("w", hook, window=30)

    assert not gate.may_claim(slots=2, busy=1, now=100.0)
    assert gate.resume_at == 105.0
    assert not gate.may_claim(slots=2, busy=1, now=104.9)
    assert len(hook.seen) == 1  # not asked again while paused
    assert gate.may_claim(slots=2, busy=1, now=105.0)  # the claim the pause delayed
    assert len(hook.seen) == 1
    assert gate.may_claim(slots=2, busy=1, now=105.1)  # the next claim asks again: 0
    assert len(hook.seen) == 2


def test_a_worker_sleeps_until_a_running_pause_ends_and_not_for_one_that_ended():
    gate = Backpressure("w", Hook(5.0), window=30)
    assert gate.paused_until(100.0) == float("inf")  # no pause yet

    gate.may_claim(slots=2, busy=0, now=100.0)

    assert gate.paused_until(101.0) == 105.0
    # Over, but its claim waits for a free slot: nothing to wake up for (no busy loop).
    assert gate.paused_until(105.0) == float("inf")


def test_the_hook_gets_the_workers_live_stats():
    hook = Hook(0)
    gate = Backpressure("worker-1", hook, window=30)
    gate.started_at = 50.0
    gate.recent.add(99.0, claimed=4, succeeded=3, failed=1)

    gate.may_claim(slots=8, busy=5, now=100.0)

    expected = WorkerStats(
        worker_id="worker-1", slots=8, busy=5, claimed=4, succeeded=3, failed=1,
        window_seconds=30, uptime_seconds=50.0,
    )  # fmt: skip
    assert hook.seen == [expected]


@pytest.mark.parametrize(
    ("returned", "logged"),
    [
        (RuntimeError("metrics backend down"), "metrics backend down"),
        ("soon", "it returned 'soon', not a number of seconds"),
        (None, "it returned None, not a number of seconds"),
        (-1, "it returned -1; return seconds >= 0"),
        (float("nan"), "it returned nan; return seconds >= 0"),
    ],
)
def test_a_failing_hook_is_logged_and_taken_as_a_short_pause(caplog, returned, logged):
    gate = Backpressure("w", Hook(returned), window=30)

    with caplog.at_level(logging.ERROR, logger="django_workqueue.worker"):
        assert not gate.may_claim(slots=2, busy=0, now=10.0)

    assert gate.resume_at == 10.0 + ERROR_PAUSE
    assert "the backpressure hook WORKQUEUE['BACKPRESSURE'] failed" in caplog.text
    assert logged in caplog.text
