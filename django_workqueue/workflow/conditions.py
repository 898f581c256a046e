"""Run conditions: the one place where a dependent's counters become a verdict.

``verdict`` is asked each time prerequisites' endings are counted on a blocked job, with the
counters as the row holds them after the count; the release engine applies what it answers.
"""

from __future__ import annotations

import enum

from ..states import RunCondition


class Verdict(enum.Enum):
    WAIT = "wait"  # prerequisites are still open and the condition may still hold
    RELEASE = "release"  # ready (or scheduled, if its run_after is later)
    CANCEL = "cancel"  # the condition can no longer be met


def verdict(
    run_condition: str, waiting_on: int, succeeded: int, one_did_not_succeed: bool
) -> Verdict:
    """The verdict for a blocked job.

    ``waiting_on``: its prerequisites still open; ``succeeded``: how many succeeded so far;
    ``one_did_not_succeed``: whether a prerequisite counted just now failed or was cancelled.

    * ``all_succeeded`` (the default): cancelled as soon as one prerequisite does not succeed,
      released when the last one succeeds;
    * ``all_finished``: released when the last one ends, however they ended;
    * ``any_succeeded``: decided when the last one ends: released if at least one succeeded,
      otherwise cancelled.
    """
    condition = RunCondition(run_condition)
    if condition == RunCondition.ALL_SUCCEEDED and one_did_not_succeed:
        return Verdict.CANCEL
    if waiting_on > 0:
        return Verdict.WAIT
    if condition == RunCondition.ANY_SUCCEEDED and succeeded == 0:
        return Verdict.CANCEL
    return Verdict.RELEASE
