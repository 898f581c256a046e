from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from collections.abc import Mapping
from typing import Any

from django.apps import AppConfig
from django.core.signals import setting_changed

from .conf import workqueue_settings as conf
from .discovery import discover_tasks
from .worker.stop_signals import install_early

logger = logging.getLogger("django_workqueue")


class WorkqueueConfig(AppConfig):
    name = "django_workqueue"
    verbose_name = "Workqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def __init__(self, app_name: str, app_module: Any) -> None:
        super().__init__(app_name, app_module)
        # django.setup() makes the app configs first, before it imports any model or task
        # module: a runworker stopped from here on exits 0 (worker/stop_signals.py).
        install_early(sys.argv)

    def ready(self) -> None:
        # Imported here, once the app registry is ready: both import the models.
        from . import checks  # noqa: F401 - registers the system checks
        from .attempt import inprocess  # noqa: F401 - registers skip-queue's runner

        discover_tasks()
        connect_realtime()
        load_eager_runner()
        setting_changed.connect(_eager_setting_changed, dispatch_uid="django_workqueue.eager")


EAGER_RUNNER = "django_workqueue.testing.runner"
"""The module that runs jobs at every in-process wake-up under ``WORKQUEUE["EAGER"]`` (it
registers itself with ``wakeup`` when imported): a plugin point chosen by a setting, imported
by its dotted path only when the setting is on, so production never loads the testing code."""


def load_eager_runner() -> None:
    """Import the eager runner if ``WORKQUEUE["EAGER"]`` is on."""
    if conf.EAGER is True:
        importlib.import_module(EAGER_RUNNER)


def _eager_setting_changed(setting: str, value: Any = None, **kwargs: Any) -> None:
    """``override_settings(WORKQUEUE={..., "EAGER": True})`` in a test turns eager mode on. A
    WORKQUEUE that is not a dict is left to the system check that names it (E002)."""
    if setting == "WORKQUEUE" and (value is None or isinstance(value, Mapping)):
        load_eager_runner()


def connect_realtime() -> None:
    """In the "channel_layer" mode, publish this process's job signals to the channel layer
    (the realtime extra; nothing is imported without it)."""
    if conf.REALTIME == "channel_layer" and importlib.util.find_spec("channels") is not None:
        # Imported here: the realtime extra (Channels) is optional.
        from .realtime import events

        events.connect()
