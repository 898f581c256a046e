"""Database drivers: all vendor SQL lives in this package, one module per vendor."""

from __future__ import annotations

from django.db import connections

from ..outcomes import Outcome, OutcomeKind
from .base import (
    ClaimedJob,
    CountedDown,
    CountedWrite,
    Driver,
    Encoded,
    Ended,
    Expired,
    FlowGroup,
    FlowHold,
    FlowPick,
    Inserted,
    LivenessToken,
    NewJob,
    Progress,
    Recorded,
    Timing,
    WorkerWatch,
)

__all__ = [
    "ClaimedJob", "CountedDown", "CountedWrite", "Driver", "Encoded", "Ended", "Expired",
    "FlowGroup", "FlowHold", "FlowPick",
    "Inserted", "LivenessToken", "NewJob", "Outcome",
    "OutcomeKind",
    "Progress", "Recorded", "Timing", "WorkerWatch", "driver_class", "driver_for",
]  # fmt: skip

SUPPORTED_VENDORS = ("postgresql", "sqlite")
_drivers: dict[str, Driver] = {}


def driver_for(alias: str) -> Driver:
    """The driver for a database alias (PostgreSQL or SQLite)."""
    driver = _drivers.get(alias)
    if driver is None:
        vendor = connections[alias].vendor
        if vendor == "postgresql":
            from .postgresql import PostgresDriver  # only the vendor in use is loaded

            driver = PostgresDriver(alias)
        elif vendor == "sqlite":
            from .sqlite import SQLiteDriver  # only the vendor in use is loaded

            driver = SQLiteDriver(alias)
        else:
            raise NotImplementedError(
                f"django-workqueue supports {' and '.join(SUPPORTED_VENDORS)}; database "
                f"{alias!r} is {vendor}. Point WORKQUEUE['DATABASE'] at a supported database."
            )
        _drivers[alias] = driver
    return driver


def driver_class(engine: str) -> type[Driver] | None:
    """The driver for a ``DATABASES`` ENGINE, or None if unsupported. Read from the setting
    alone, without loading the backend: the system checks ask before any connection."""
    if engine.endswith(("postgresql", "postgis")):
        from .postgresql import PostgresDriver  # only the vendor in use is loaded

        return PostgresDriver
    if engine.endswith("sqlite3"):
        from .sqlite import SQLiteDriver  # only the vendor in use is loaded

        return SQLiteDriver
    return None
