"""Settings overridden for one test."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.test import override_settings


def workqueue_settings(**overrides: Any) -> override_settings:
    """``override_settings`` for a few WORKQUEUE keys, keeping the test project's others."""
    return override_settings(WORKQUEUE={**settings.WORKQUEUE, **overrides})
