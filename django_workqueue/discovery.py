"""Discovery: the only imports that register tasks, run when a process starts.

Finding a task by its name (``registry.find_task``) never imports: names come from requests,
job rows, schedules and command lines, and importing a module runs its code. The registry is
filled here instead: each installed app's ``tasks`` module and ``WORKQUEUE["TASK_MODULES"]``
(at ``ready()``), and the URLconf in every worker (``import_urlconf``).
"""

from __future__ import annotations

import importlib
import logging

from django.apps import apps
from django.conf import settings
from django.utils.module_loading import module_has_submodule

from .conf import workqueue_settings as conf
from .registry import import_errors

logger = logging.getLogger("django_workqueue")


def discover_tasks() -> None:
    """Import each installed app's ``tasks`` module and WORKQUEUE['TASK_MODULES'].

    This and ``import_urlconf`` are the only imports that register tasks: finding a task by
    its name (``registry.find_task``) never imports, as names come from requests and job rows.
    """
    modules = [
        f"{config.name}.tasks"
        for config in apps.get_app_configs()
        if module_has_submodule(config.module, "tasks")
    ]
    for name in [*modules, *conf.TASK_MODULES]:
        _import_task_module(name)


def import_urlconf() -> None:
    """Import ROOT_URLCONF, as the web process does to serve its first request: a worker
    (``runworker`` and each of its child processes) calls this at start, so that it knows the
    tasks that the views' modules define (``django.tasks`` tasks often live next to the views
    that enqueue them). Not done in ``ready()``: a URLconf may need every app ready (the
    admin's ``site.urls`` reads what each app registered)."""
    urlconf = getattr(settings, "ROOT_URLCONF", None)
    if isinstance(urlconf, str) and urlconf:
        _import_task_module(urlconf)


def _import_task_module(name: str) -> None:
    """Import ``name``; a failure is logged once and kept in ``import_errors`` (reported by the
    check W006, by runworker and in the error of a job whose task is missing)."""
    try:
        importlib.import_module(name)
    except Exception as exc:
        if name not in import_errors:
            logger.error("could not import task module %s: %r", name, exc)
        import_errors[name] = f"{type(exc).__name__}: {exc}"
