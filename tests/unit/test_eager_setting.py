"""WORKQUEUE["EAGER"] is checked like every setting."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from django_workqueue.checks import check_settings


@pytest.mark.parametrize("value", [True, False])
def test_eager_takes_a_boolean(value: bool) -> None:
    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "EAGER": value}):
        assert check_settings() == []


def test_eager_refuses_anything_else() -> None:
    with override_settings(WORKQUEUE={**settings.WORKQUEUE, "EAGER": "yes"}):
        (message,) = check_settings()
    assert message.id == "django_workqueue.E002"
    assert "WORKQUEUE['EAGER'] must be True or False, got 'yes'" in message.msg
