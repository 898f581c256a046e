"""The settings object: ``WORKQUEUE`` merged over the defaults, read again when it changes."""

from __future__ import annotations

from django.test import override_settings

from django_workqueue.conf import DEFAULTS, workqueue_settings


def read(name: str) -> object:
    return getattr(workqueue_settings, name)


def test_a_setting_read_before_a_change_is_read_anew_after_it_and_after_its_undoing():
    before = workqueue_settings.MAX_RESULT_BYTES  # read, and kept until the settings change
    with override_settings(WORKQUEUE={"MAX_RESULT_BYTES": before + 1}):
        assert read("MAX_RESULT_BYTES") == before + 1
        assert read("MAX_RESULT_BYTES") == before + 1
    assert read("MAX_RESULT_BYTES") == before


def test_a_setting_left_out_is_its_default():
    with override_settings(WORKQUEUE={}):
        assert read("POLL_INTERVAL") == DEFAULTS["POLL_INTERVAL"]
