"""The system checks of the observability settings: PROGRESS_INTERVAL and METRICS_TOKEN."""

from __future__ import annotations

import pytest

from django_workqueue.checks import check_settings
from tests.support.settings import workqueue_settings


@pytest.mark.parametrize("value", [0, -1, "1", None])
def test_progress_interval_must_be_a_positive_number(value: object) -> None:
    with workqueue_settings(PROGRESS_INTERVAL=value):
        messages = check_settings()
    assert [m.id for m in messages] == ["django_workqueue.E002"]
    assert "PROGRESS_INTERVAL" in messages[0].msg


@pytest.mark.parametrize("token", ["short", 12345678901234567, b"0123456789abcdefgh"])
def test_a_metrics_token_that_is_no_long_secret_string_is_an_error(token: object) -> None:
    with workqueue_settings(METRICS_TOKEN=token):
        messages = check_settings()
    assert [m.id for m in messages] == ["django_workqueue.E002"]
    assert "METRICS_TOKEN" in messages[0].msg and "secrets" in messages[0].hint


@pytest.mark.parametrize("token", [None, "a-long-enough-secret-token"])
def test_no_token_or_a_long_one_passes(token: object) -> None:
    with workqueue_settings(METRICS_TOKEN=token):
        assert check_settings() == []
