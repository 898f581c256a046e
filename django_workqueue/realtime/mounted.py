"""Whether a browser can follow a job over a websocket here: Channels is installed, live
updates are on (``WORKQUEUE["REALTIME"]``), and the project's ASGI application
(``ASGI_APPLICATION``) routes ``ws/workqueue/jobs/<id>/`` to this package's consumer.

Pages that draw a live progress bar (the admin's job page) ask this before they tell the
browser to open a websocket; where it is false they refresh by polling instead, so a project
served over plain WSGI, or without the routes mounted, never sees a websocket request it
cannot answer. The answer is read once per process (importing the ASGI application is not
free) and read again when a test changes one of the settings it depends on.

Channels is imported only when it is installed; this module is safe to import without it.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from ..conf import workqueue_settings as conf

logger = logging.getLogger(__name__)

# The attributes under which Channels' routers and middlewares (and most others, which
# follow them) keep the application they wrap.
_WRAPPED = ("application_mapping", "inner", "application", "app", "routes", "callback")
_DEPTH = 12


def job_route_mounted() -> bool:
    """True when the browser may open ``ws/workqueue/jobs/<id>/``."""
    if conf.REALTIME is None or importlib.util.find_spec("channels") is None:
        return False
    return _routes_job_consumer(getattr(settings, "ASGI_APPLICATION", None))


@functools.cache
def _routes_job_consumer(dotted_path: str | None) -> bool:
    if not dotted_path:
        return False
    try:
        application = import_string(dotted_path)
    except Exception:  # a project whose ASGI module fails to import serves no websocket
        logger.warning(
            "ASGI_APPLICATION %r does not import: live progress falls back to polling",
            dotted_path, exc_info=True,
        )  # fmt: skip
        return False
    from .consumers import JobConsumer  # Channels (the realtime extra): only once it is found

    return _reaches(application, JobConsumer, _DEPTH, set())


def _reaches(node: Any, consumer: type, depth: int, seen: set[int]) -> bool:
    """Whether ``consumer`` is among the applications ``node`` routes to (``as_asgi()`` keeps
    its class as ``consumer_class``)."""
    if depth < 0 or id(node) in seen:
        return False
    seen.add(id(node))
    routed = getattr(node, "consumer_class", None)
    if isinstance(routed, type) and issubclass(routed, consumer):
        return True
    if isinstance(node, dict):
        children = list(node.values())
    elif isinstance(node, list | tuple):
        children = list(node)
    else:
        children = [getattr(node, name) for name in _WRAPPED if hasattr(node, name)]
    return any(_reaches(child, consumer, depth - 1, seen) for child in children)


def _forget(*, setting: str, **kwargs: Any) -> None:
    if setting in ("ASGI_APPLICATION", "INSTALLED_APPS", "WORKQUEUE"):
        _routes_job_consumer.cache_clear()


setting_changed.connect(_forget)
