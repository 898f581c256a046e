"""One holder at a time of a fleet-wide maintenance service: a lease row per service.

Most maintenance is safe to run from every worker at once (each row it changes is one guarded
write). A service that does heavy, fleet-wide work (retention deletes in bulk) is run by one
worker at a time instead, so that a fleet of fifty workers does not run fifty purges: the
worker whose ``MaintenanceLease`` row it is. The holder renews the row each time it runs the
service; once the row has expired (its holder stopped, crashed or lost the database), the next
worker to try takes it over. Every take and renewal is one guarded statement on the database's
clock, so two workers can never both believe they hold it at the same moment of that clock.

>>> lease = Leadership("default", "retention", owner=worker_id, seconds=180)
>>> if lease.hold(): ...  # this worker runs the service now
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Case, F, Q, When
from django.db.models.functions import Now

from ..db import driver_for
from ..models import MaintenanceLease

logger = logging.getLogger("django_workqueue.maintenance")


class Leadership:
    """The lease of maintenance service ``name`` as seen by one would-be holder, ``owner``."""

    def __init__(self, alias: str, name: str, *, owner: str, seconds: float) -> None:
        self.alias = alias
        self.name = name
        self.owner = owner
        self.seconds = seconds
        """How long a take or renewal holds: a few intervals of the service, so that one late
        run does not hand the service over."""
        self.held = False
        """Whether the last ``hold()`` took or renewed the lease."""

    def hold(self, now: datetime | None = None, *, gone_holder: str | None = None) -> bool:
        """Take the lease if it is free or expired, or held by ``gone_holder`` (a worker that
        liveness saw die), or renew it if ``owner`` holds it; return whether ``owner`` holds it
        now. ``now`` replaces the database's clock (tests)."""
        clock: Any = Now() if now is None else now
        expires = clock + timedelta(seconds=self.seconds)
        rows = MaintenanceLease.objects.using(self.alias).filter(name=self.name)
        takeable = Q(owner=self.owner) | Q(expires_at__lt=clock)
        if gone_holder is not None:
            takeable |= Q(owner=gone_holder)
        with transaction.atomic(using=self.alias):
            driver_for(self.alias).bound_lock_waits()  # a stuck holder's row: fail, retry later
            # One guarded UPDATE: renewed by its holder, or taken over once expired or its
            # holder gone (still that holder: of two takers, one wins); on PostgreSQL a
            # concurrent taker waits for the row and then finds it taken.
            taken = rows.filter(takeable).update(
                owner=self.owner,
                expires_at=expires,
                acquired_at=Case(When(owner=self.owner, then=F("acquired_at")), default=clock),
            )
            if not taken and not rows.exists():
                taken = self._insert(clock, expires)
        if taken and not self.held:
            logger.info("%s now runs %s (lease of %.0fs)", self.owner, self.name, self.seconds)
        elif self.held and not taken:
            logger.info("%s no longer runs %s: another worker took it over", self.owner, self.name)
        self.held = bool(taken)
        return self.held

    def _insert(self, clock: Any, expires: Any) -> int:
        """The first take of a service: the primary key lets one of two racing inserts in."""
        try:
            with transaction.atomic(using=self.alias):  # a savepoint: the loser goes on
                MaintenanceLease.objects.using(self.alias).create(
                    name=self.name, owner=self.owner, expires_at=expires, acquired_at=clock
                )
        except IntegrityError:
            return 0
        return 1

    def release(self) -> bool:
        """Give the lease up (a stopping worker), so that another takes it at its next try
        instead of after the expiry; return whether ``owner`` held it."""
        deleted, _ = (
            MaintenanceLease.objects.using(self.alias)
            .filter(name=self.name, owner=self.owner)
            .delete()
        )
        self.held = False
        return bool(deleted)

    def seconds_left(self) -> float:
        """How long the lease has left by the database's clock (one read, nothing written):
        0.0 when it is free, expired, or held by ``owner`` (whose ``hold()`` renews it). A
        would-be holder need not try before then, unless its holder is gone (liveness)."""
        return self.state()[0]

    def state(self) -> tuple[float, str | None]:
        """``seconds_left()`` and who holds the lease while it has some left (one read)."""
        row = (
            MaintenanceLease.objects.using(self.alias)
            .filter(name=self.name)
            .annotate(clock=Now())
            .values_list("owner", "expires_at", "clock")
            .first()
        )
        if row is None or row[0] == self.owner:
            return 0.0, None
        owner, expires_at, clock = row
        left = max(0.0, (expires_at - clock).total_seconds())
        return left, owner if left else None

    def holder(self) -> str | None:
        """Who holds the lease now (by the database's clock), or None."""
        row = (
            MaintenanceLease.objects.using(self.alias)
            .filter(name=self.name, expires_at__gte=Now())
            .values_list("owner", flat=True)
            .first()
        )
        return row
