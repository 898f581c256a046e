"""Liveness: a crash is seen when it happens, not when a lease runs out.

Each worker records in its ``WorkerProcess`` row a token of something that ends with its
process (``worker/registration.py``): on PostgreSQL an advisory lock its LISTEN session holds,
which the server drops with the session (``db/pg_liveness.py``); on SQLite, one host by
definition, its pid and that pid's start. From it:

* the reaper takes back the running jobs of every worker that is gone
  (``Driver.gone_workers``), whatever their lease, once that death is confirmed (``Deaths``:
  seen for ``CONFIRM_SECONDS``);
* the maintenance lease follows its holder: a would-be maintainer that finds the holder gone
  takes the lease over at once (``Leadership.hold(gone_holder=...)``), and a few other
  workers, the standbys, watch the holder at no cost to the database (``HolderWatch``: on
  PostgreSQL a lock wait on a connection of its own, held by at most
  ``WORKQUEUE["MAINTAINER_STANDBYS"]`` workers, ``db/pg_liveness.py``; on SQLite a look at the
  pid, by every worker), so a dead maintainer is replaced within about a second instead of a
  lease.

Whether a token proves a death is the driver's one answer (``Driver.gone_workers``, and
``Driver.trusted_liveness`` for a token that would prove nothing: on PostgreSQL a key taken
before the server's last start), which the reaper and ``look_up`` both read.

Leases stay the fallback for what liveness cannot see: a process alive but cut off from the
database, a body that hangs, a worker without a token (no LISTEN connection, no ``/proc``), a
worker whose token is in doubt (``worker/registration.py``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass

from django.db.models import Case, Value, When

from ..db import Driver, WorkerWatch
from ..models import WorkerProcess

logger = logging.getLogger("django_workqueue.maintenance")


CONFIRM_SECONDS = 2.0
"""How long the fleet's reaper sees a worker gone before it takes the worker's jobs back. A
session ends with its process, but also when the server ends it while the process lives
(``pg_terminate_backend``, an operator closing connections): such a worker's LISTEN connection
reconnects within a moment and takes its key again, and its jobs must not run twice meanwhile.
A dead worker never takes its key again, so its jobs come back this much later than its death
is first seen: still seconds, not a lease."""


class Deaths:
    """The workers liveness sees gone and since when (this process's clock): a death is
    confirmed once it has been seen for ``seconds`` (``CONFIRM_SECONDS``), on every look
    between. A worker seen alive again (its key taken anew) is forgotten. ``seconds=0``: a
    death seen is confirmed at once (a one-shot reap, from the command line or a test)."""

    def __init__(self, seconds: float = CONFIRM_SECONDS) -> None:
        self.seconds = seconds
        self._since: dict[str, float] = {}

    def confirm(self, seen: Collection[str], at: float) -> tuple[set[str], float | None]:
        """Record that ``seen`` are gone at ``at`` (and no other worker); return those whose
        death is confirmed, and in how many seconds the next unconfirmed one will be (None:
        none waits)."""
        self._since = {worker: self._since.get(worker, at) for worker in seen}
        confirmed = {w for w, since in self._since.items() if at - since >= self.seconds}
        waiting = [since + self.seconds - at for w, since in self._since.items()
                   if w not in confirmed]  # fmt: skip
        return confirmed, (min(waiting) if waiting else None)


@dataclass(frozen=True, slots=True)
class Holder:
    """A worker as liveness sees it: its row's host, pid and token, and whether it is gone."""

    id: str
    host: str
    pid: int
    liveness: str
    gone: bool


def look_up(alias: str, driver: Driver, worker_id: str) -> Holder | None:
    """The worker ``worker_id`` as liveness sees it now (one read), or None if it has no row.
    Dead or not is the driver's one answer (``gone_workers``); a token that would prove
    nothing (``trusted_liveness``: e.g. a key taken before the server's last start) is shown
    as none, so that the holder is watched by its lease alone until it declares one anew."""
    gone = driver.gone_workers()
    is_gone = (
        Case(When(id__in=gone, then=Value(True)), default=Value(False)) if gone else Value(False)
    )
    trusted = Case(When(driver.trusted_liveness(), then=Value(True)), default=Value(False))
    row = (
        WorkerProcess.objects.using(alias)
        .filter(id=worker_id)
        .annotate(gone=is_gone, trusted=trusted)
        .values_list("host", "pid", "liveness", "gone", "trusted")
        .first()
    )
    if row is None:
        return None
    host, pid, token, dead, counts = row
    token = token if counts else ""
    return Holder(worker_id, host, pid, token, bool(dead and token))


class HolderWatch(threading.Thread):
    """Waits for the maintenance lease's holder to die and then calls ``on_gone``: the
    maintainer (its control thread) says whom to watch with ``follow``."""

    def __init__(self, watch: WorkerWatch, on_gone: Callable[[str], None]) -> None:
        super().__init__(name="workqueue-holder-watch", daemon=True)
        self.watch = watch
        self.on_gone = on_gone
        self.following: Holder | None = None
        self._lock = threading.Lock()
        self._changed = threading.Event()
        self._stopping = threading.Event()

    def follow(self, holder: Holder | None) -> None:
        """Watch ``holder`` from now on (None: nobody, e.g. this worker holds the lease)."""
        with self._lock:
            if holder == self.following:
                return
            self.following = holder
            self._changed.set()
        self.watch.interrupt()

    def stop(self) -> None:
        self._stopping.set()
        self.follow(None)
        self._changed.set()
        self.watch.interrupt()

    def run(self) -> None:
        backoff = 1.0
        try:
            while not self._stopping.is_set():
                with self._lock:
                    holder = self.following
                    self._changed.clear()
                if holder is None:
                    self.watch.close()  # nobody to watch: no connection held meanwhile
                    self._changed.wait()
                    continue
                if self.watch.wait_gone(holder):
                    backoff = 1.0
                    with self._lock:
                        if self.following == holder:
                            self.following = None  # until the maintainer says who is next
                    logger.info("the maintainer %s is gone: taking over", holder.id)
                    self.on_gone(holder.id)
                elif not self._changed.is_set():  # no connection (the server full?): back off
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, 60.0)
        finally:
            self.watch.close()
