"""``WORKQUEUE["RETENTION"]``: merged over the defaults; checked with messages naming the fix."""

from __future__ import annotations

import datetime as dt

import pytest

from django_workqueue.checks import check_settings
from django_workqueue.maintenance.retention import Policy
from tests.support.settings import workqueue_settings


def retention_errors(value) -> list[str]:
    with workqueue_settings(RETENTION=value):
        return [e.msg for e in check_settings() if e.id == "django_workqueue.E015"]


def test_the_default_keeps_succeeded_and_cancelled_a_week_and_failed_a_month():
    assert Policy.from_days({}) == Policy(
        succeeded=dt.timedelta(days=7), failed=dt.timedelta(days=30), cancelled=dt.timedelta(days=7)
    )


def test_statuses_not_named_keep_their_defaults_and_none_keeps_forever():
    policy = Policy.from_days({"failed": None, "succeeded": 0.5})

    assert policy.ages() == {"succeeded": dt.timedelta(hours=12), "cancelled": dt.timedelta(days=7)}


@pytest.mark.parametrize(
    "value", [{}, {"succeeded": 1}, {"succeeded": 0, "failed": None, "cancelled": 2.5}]
)
def test_days_or_none_per_status_pass_the_check(value):
    assert retention_errors(value) == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (7, "WORKQUEUE['RETENTION'] must be a dict of days per status, got 7."),
        ({"done": 3}, "WORKQUEUE['RETENTION'] has an unknown status 'done'; the statuses are "
                      "succeeded, failed, cancelled."),
        ({"failed": -1}, "WORKQUEUE['RETENTION']['failed'] must be a number of days >= 0 or "
                         "None (keep forever), got -1."),
        ({"succeeded": "7"}, "WORKQUEUE['RETENTION']['succeeded'] must be a number of days >= 0 "
                             "or None (keep forever), got '7'."),
        ({"cancelled": True}, "WORKQUEUE['RETENTION']['cancelled'] must be a number of days >= "
                              "0 or None (keep forever), got True."),
    ],
)  # fmt: skip
def test_a_bad_retention_is_reported_with_the_fix(value, message):
    assert retention_errors(value) == [message]
