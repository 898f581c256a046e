from __future__ import annotations

import importlib
import importlib.util
import logging

from django.apps import AppConfig, apps
from django.utils.module_loading import module_has_submodule

from .registry import import_errors

logger = logging.getLogger("django_workqueue")


class WorkqueueConfig(AppConfig):
    name = "django_workqueue"
    verbose_name = "Workqueue"
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


def discover_tasks() -> None:
    """Import each installed app's ``tasks`` module and WORKQUEUE['TASK_MODULES']."""
    from .conf import workqueue_settings as conf

    modules = [
        f"{config.name}.tasks"
        for config in apps.get_app_configs()
        if module_has_submodule(config.module, "tasks")
    ]
    for name in [*modules, *conf.TASK_MODULES]:
        try:
            importlib.import_module(name)
        except Exception as exc:
            if name not in import_errors:
                logger.error("could not import task module %s: %r", name, exc)
            import_errors[name] = f"{type(exc).__name__}: {exc}"
