"""In-process wake-ups: enqueue wakes the workers of its own process when its transaction commits.

This is how a worker running inside the enqueueing process (tests, the demo, SQLite set-ups)
hears of new work at once; other processes hear through LISTEN/NOTIFY on PostgreSQL or polling.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

_lock = threading.Lock()
_listeners: dict[threading.Event, frozenset[str]] = {}


def register(event: threading.Event, queues: Iterable[str]) -> None:
    with _lock:
        _listeners[event] = frozenset(queues)


def unregister(event: threading.Event) -> None:
    with _lock:
        _listeners.pop(event, None)


def wake(queues: Iterable[str]) -> None:
    wanted = set(queues)
    with _lock:
        listeners = list(_listeners.items())
    for event, served in listeners:
        if served & wanted:
            event.set()
    from .conf import workqueue_settings as conf

    if conf.EAGER:
        # WORKQUEUE["EAGER"] (tests): what a worker would now claim runs here, at once.
        from .testing.runner import run_eagerly

        run_eagerly()
