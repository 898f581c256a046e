from __future__ import annotations

import importlib
import importlib.util
import logging

from django.apps import AppConfig

from .discovery import discover_tasks

logger = logging.getLogger("django_workqueue")


class WorkqueueConfig(AppConfig):
    name = "django_workqueue"
    verbose_name = "Work queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401 - registers the system checks

        discover_tasks()
        connect_realtime()


def connect_realtime() -> None:
    """In the "channel_layer" mode, publish this process's job signals to the channel layer
    (the realtime extra; nothing is imported without it)."""
    from .conf import workqueue_settings as conf

    if conf.REALTIME == "channel_layer" and importlib.util.find_spec("channels") is not None:
        from .realtime import events

        events.connect()
