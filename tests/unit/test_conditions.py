"""Run conditions: what a blocked job's counters mean (workflow/conditions.py)."""

from __future__ import annotations

import pytest

from django_workqueue.states import RunCondition
from django_workqueue.workflow.conditions import Verdict, verdict

ALL_SUCCEEDED, ALL_FINISHED, ANY_SUCCEEDED = (c.value for c in RunCondition)


@pytest.mark.parametrize(
    ("condition", "waiting_on", "succeeded", "one_did_not_succeed", "expected"),
    [
        # all_succeeded: one failure is enough to cancel, even with prerequisites still open.
        (ALL_SUCCEEDED, 2, 0, True, Verdict.CANCEL),
        (ALL_SUCCEEDED, 0, 2, True, Verdict.CANCEL),
        (ALL_SUCCEEDED, 1, 1, False, Verdict.WAIT),
        (ALL_SUCCEEDED, 0, 3, False, Verdict.RELEASE),
        # all_finished: only the count of open prerequisites matters.
        (ALL_FINISHED, 1, 0, True, Verdict.WAIT),
        (ALL_FINISHED, 0, 0, True, Verdict.RELEASE),
        (ALL_FINISHED, 0, 2, False, Verdict.RELEASE),
        # any_succeeded: decided when the last prerequisite ends.
        (ANY_SUCCEEDED, 1, 0, True, Verdict.WAIT),
        (ANY_SUCCEEDED, 1, 1, False, Verdict.WAIT),
        (ANY_SUCCEEDED, 0, 1, True, Verdict.RELEASE),
        (ANY_SUCCEEDED, 0, 0, True, Verdict.CANCEL),
    ],
)
def test_verdict_of_each_run_condition(
    condition, waiting_on, succeeded, one_did_not_succeed, expected
):
    assert verdict(condition, waiting_on, succeeded, one_did_not_succeed) == expected


def test_an_unknown_run_condition_is_refused():
    with pytest.raises(ValueError):
        verdict("most_succeeded", 0, 0, False)
