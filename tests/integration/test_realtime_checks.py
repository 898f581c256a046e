"""``WORKQUEUE["REALTIME"]``: the system checks name a wrong mode or a channel layer that cannot
carry events from workers, and the app connects its publisher only in the channel-layer mode."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_workqueue import signals
from django_workqueue.apps import connect_realtime
from django_workqueue.checks import check_settings
from django_workqueue.realtime import events
from tests.support.settings import workqueue_settings

REDIS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                     "CONFIG": {"hosts": ["redis://127.0.0.1:6379"]}}}  # fmt: skip
IN_MEMORY = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def realtime_messages(mode: object, layers: object = REDIS) -> list[tuple[str, str]]:
    with override_settings(CHANNEL_LAYERS=layers), workqueue_settings(REALTIME=mode):
        return [(m.id or "", m.msg) for m in check_settings() if "REALTIME" in m.msg]


@pytest.mark.parametrize("mode", ["database", None, "channel_layer"])
def test_the_three_modes_pass_with_a_redis_layer(mode: object) -> None:
    assert realtime_messages(mode) == []


def test_an_unknown_mode_is_an_error_naming_it() -> None:
    [(code, text)] = realtime_messages("redis")
    assert code == "django_workqueue.E030" and "'redis'" in text


def test_the_channel_layer_mode_without_a_layer_is_an_error() -> None:
    [(code, text)] = realtime_messages("channel_layer", {})
    assert code == "django_workqueue.E031" and "CHANNEL_LAYERS" in text


def test_the_in_memory_layer_is_a_warning_it_does_not_cross_processes() -> None:
    [(code, text)] = realtime_messages("channel_layer", IN_MEMORY)
    assert code == "django_workqueue.W031" and "does not cross processes" in text


def test_the_poll_interval_must_be_positive() -> None:
    with workqueue_settings(REALTIME_POLL_INTERVAL=0):
        assert any("REALTIME_POLL_INTERVAL" in m.msg for m in check_settings())


@pytest.fixture
def disconnected() -> Iterator[None]:
    events.disconnect()
    yield
    events.disconnect()


def publishes() -> bool:
    return any(events.DISPATCH_UID in str(entry[0]) for entry in signals.job_progress.receivers)


def test_only_the_channel_layer_mode_connects_the_publisher(disconnected: None) -> None:
    with workqueue_settings(REALTIME="database"):
        connect_realtime()
    assert not publishes()
    with workqueue_settings(REALTIME="channel_layer"):
        connect_realtime()
    assert publishes()
