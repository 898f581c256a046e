"""The attempt budgets' rule (``budgets.py``): which ending spends what, when a budget is spent,
and how an attempt reads."""

from __future__ import annotations

import pytest

from django_workqueue import budgets
from django_workqueue.budgets import Charge
from django_workqueue.outcomes import OutcomeKind


def test_every_ending_is_decided_and_only_the_bodys_spend_its_budget() -> None:
    charges = {kind: budgets.charge_of(kind) for kind in OutcomeKind}
    assert charges == {
        OutcomeKind.SUCCEEDED: Charge.ATTEMPT,
        OutcomeKind.RETRY: Charge.ATTEMPT,
        OutcomeKind.DISCARD: Charge.ATTEMPT,
        OutcomeKind.CANCELLED: Charge.ATTEMPT,
        OutcomeKind.LEASE_EXPIRED: Charge.CRASH,
        OutcomeKind.SNOOZE: Charge.NOTHING,
        OutcomeKind.RELEASE: Charge.NOTHING,
    }


@pytest.mark.parametrize(
    ("charge", "charged", "crashes", "spent"),
    [
        (Charge.ATTEMPT, 0, 9, False),  # crashes never spend the body's budget
        (Charge.ATTEMPT, 4, 0, True),  # the fifth of five
        (Charge.CRASH, 9, 1, False),  # nor the body's failures the crash budget
        (Charge.CRASH, 0, 4, True),  # the crash budget is max(MAX_CRASHES=3, max_attempts=5)
        (Charge.NOTHING, 99, 99, False),
    ],
)
def test_each_budget_is_spent_by_its_own_charges(
    charge: Charge, charged: int, crashes: int, spent: bool
) -> None:
    assert (
        budgets.spent(charge, max_attempts=5, attempts_charged=charged, crashes_charged=crashes)
        is spent
    )


def test_a_task_of_one_attempt_survives_crashes_up_to_max_crashes() -> None:
    assert budgets.crash_budget(1) == 3
    assert not budgets.spent(Charge.CRASH, max_attempts=1, attempts_charged=0, crashes_charged=1)
    assert budgets.spent(Charge.CRASH, max_attempts=1, attempts_charged=0, crashes_charged=2)


@pytest.mark.parametrize(
    ("status", "charged", "redriven", "shown"),
    [
        ("ready", 0, 0, "attempt 1 of 5"),
        ("running", 2, 0, "attempt 3 of 5"),
        ("failed", 5, 0, "attempt 5 of 5"),
        ("ready", 0, 3, "attempt 1 of 5 (3 before the redrive)"),
        ("succeeded", 1, 3, "attempt 1 of 5 (3 before the redrive)"),
    ],
)
def test_an_attempt_reads_as_its_place_in_its_budget(
    status: str, charged: int, redriven: int, shown: str
) -> None:
    described = budgets.describe(
        status=status, attempts_charged=charged, max_attempts=5, redriven_attempts=redriven
    )
    assert described == shown
