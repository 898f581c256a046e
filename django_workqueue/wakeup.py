"""In-process wake-ups: enqueue wakes the workers of its own process when its transaction commits.

This is how a worker running inside the enqueueing process (tests, the demo, SQLite set-ups)
hears of new work at once; other processes hear through LISTEN/NOTIFY on PostgreSQL or polling.
Whatever runs jobs in this process registers here: a worker its wake-up event and the queues it
serves, ``django_workqueue.testing`` its eager runner (``WORKQUEUE["EAGER"]``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from .conf import workqueue_settings as conf

_lock = threading.Lock()
_listeners: dict[threading.Event, frozenset[str]] = {}
_eager: Callable[[], None] | None = None


def register(event: threading.Event, queues: Iterable[str]) -> None:
    with _lock:
        _listeners[event] = frozenset(queues)


def unregister(event: threading.Event) -> None:
    with _lock:
        _listeners.pop(event, None)


def register_eager(runner: Callable[[], None]) -> None:
    """Name what runs the ready jobs here at every wake-up while ``WORKQUEUE["EAGER"]`` is on
    (``testing.runner.run_eagerly``, which registers itself when imported)."""
    global _eager
    _eager = runner


def wake(queues: Iterable[str]) -> None:
    wanted = set(queues)
    with _lock:
        listeners = list(_listeners.items())
    for event, served in listeners:
        if served & wanted:
            event.set()
    if conf.EAGER and _eager is not None:
        # WORKQUEUE["EAGER"] (tests): what a worker would now claim runs here, at once.
        _eager()
