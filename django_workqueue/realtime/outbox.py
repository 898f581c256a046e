"""Outgoing messages of one connection, coalesced: a slow client gets the latest state of each
thing it follows, never an unbounded backlog.

Messages are keyed (a job's id, a workflow's id); a newer message for a key replaces the one
not yet sent and moves to the back, so the order of keys is the order of their latest change.
At most ``limit`` keys wait; beyond, the oldest are dropped and counted, and the next
``take()`` reports how many (a queue's stream under a burst).

>>> box = Outbox(limit=2)
>>> box.put(("job", 1), {"n": 1}); box.put(("job", 1), {"n": 2})
>>> box.take()
[(('job', 1), {'n': 2})]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any


class Outbox:
    def __init__(self, limit: int = 1000) -> None:
        self.limit = limit
        self.pending: OrderedDict[Hashable, dict[str, Any]] = OrderedDict()
        self.dropped = 0

    def put(self, key: Hashable, message: dict[str, Any]) -> None:
        self.pending.pop(key, None)
        self.pending[key] = message
        while len(self.pending) > self.limit:
            self.pending.popitem(last=False)
            self.dropped += 1

    def take(self) -> list[tuple[Hashable, dict[str, Any]]]:
        """Everything waiting as (key, message), oldest first; first an ``overflow`` notice
        (key None) if any were dropped."""
        messages: list[tuple[Hashable, dict[str, Any]]] = list(self.pending.items())
        self.pending.clear()
        if self.dropped:
            notice = {"type": "overflow", "event": "dropped", "dropped": self.dropped}
            messages.insert(0, (None, notice))
            self.dropped = 0
        return messages

    def __len__(self) -> int:
        return len(self.pending)
