"""Cron schedules: their declarations (``WORKQUEUE["SCHEDULES"]`` and ``@task(cron=...)``),
their validation, their ticks, and their sync into the ``Schedule`` table.

Parsing and the computation of ticks are croniter's (5 fields, or 6 with seconds last); ticks
are computed in the schedule's time zone and stored in UTC. A worker syncs the declarations at
start (``sync_schedules``). The declarations own what a schedule does (task, cron, time zone,
arguments, queue, catch-up); ``enabled`` belongs to the operator once the row exists: a deploy
never re-enables a schedule someone disabled at run time, but ``"enabled": False`` in the
settings does disable it. Rows of ``source="runtime"`` (made in the admin or by code) are never
touched by the sync; declared rows no longer declared are deleted.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models.functions import Now

from .conf import workqueue_settings as conf
from .states import CatchUp

logger = logging.getLogger("django_workqueue.schedules")

_KEYS = {"task", "cron", "timezone", "args", "kwargs", "queue", "enabled", "catch_up"}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Declared:
    """One schedule as the settings or a ``@task(cron=...)`` declare it."""

    name: str
    task_name: str
    cron: str
    timezone: str = "UTC"
    args: list[Any] = dataclasses.field(default_factory=list)
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    queue: str | None = None
    enabled: bool = True
    catch_up: str = CatchUp.LATEST
    source: str = "settings"


def cron_problem(cron: Any) -> str | None:
    """Why croniter cannot use ``cron``, or None. Five fields, or six (seconds last)."""
    if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
        return (
            f"cron must be a string of 5 fields (minute hour day month weekday) or 6 (seconds "
            f"last), got {cron!r}"
        )
    if not croniter.is_valid(cron):
        return f"cron {cron!r} is not a valid cron expression"
    return None


def timezone_problem(name: Any) -> str | None:
    """Why ``name`` is not an IANA time zone, or None."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        return f"timezone {name!r} is not an IANA time zone name (e.g. 'Europe/Paris', 'UTC')"
    return None


def next_tick(cron: str, timezone: str, after: datetime) -> datetime:
    """The first tick of ``cron`` in ``timezone`` strictly after ``after``, in UTC."""
    local = after.astimezone(ZoneInfo(timezone))
    return croniter(cron, local).get_next(datetime).astimezone(UTC)


def latest_tick(cron: str, timezone: str, first: datetime, now: datetime) -> datetime:
    """The last tick at or before ``now``, ``first`` (a due tick) at the earliest. croniter's
    ``get_prev`` is strictly before its start, so a tick at exactly ``now`` is looked for too."""
    local = now.astimezone(ZoneInfo(timezone))
    before = croniter(cron, local).get_prev(datetime).astimezone(UTC)
    at = next_tick(cron, timezone, before)
    latest = at if at <= now else before
    return max(latest, first)


def declared_schedules() -> dict[str, Declared]:
    """Every declared schedule by name; raises ``ImproperlyConfigured`` listing every problem."""
    declared, problems = _collect()
    if problems:
        raise ImproperlyConfigured("; ".join(problems))
    return declared


def schedule_problems() -> list[str]:
    """The problems of the declared schedules (the system check reports them)."""
    return _collect()[1]


def _collect() -> tuple[dict[str, Declared], list[str]]:
    from .registry import registered_tasks

    declared: dict[str, Declared] = {}
    problems: list[str] = []
    for task in registered_tasks().values():
        spec = task.spec
        if spec.cron is not None:
            declared[spec.name] = Declared(
                name=spec.name, task_name=spec.name, cron=spec.cron,
                timezone=spec.cron_timezone, catch_up=spec.cron_catch_up, source="task",
            )  # fmt: skip
    entries = conf.SCHEDULES
    if not isinstance(entries, Mapping):
        return declared, [
            f"WORKQUEUE['SCHEDULES'] must be a dict of name -> schedule, got {entries!r}"
        ]
    for name, entry in entries.items():
        where = f"WORKQUEUE['SCHEDULES'][{name!r}]"
        if not isinstance(name, str) or not 0 < len(name) <= 200:
            problems.append(f"{where}: the name must be a string of 1 to 200 characters")
            continue
        if name in declared:
            problems.append(f"{where}: the name is the name of a @task(cron=...); rename one")
            continue
        found = _entry_problems(entry) if isinstance(entry, Mapping) else ["must be a dict"]
        problems += [f"{where}: {problem}" for problem in found]
        if not found:
            declared[name] = Declared(
                name=name, task_name=entry["task"], cron=entry["cron"],
                timezone=entry.get("timezone", "UTC"), args=list(entry.get("args", [])),
                kwargs=dict(entry.get("kwargs", {})), queue=entry.get("queue"),
                enabled=entry.get("enabled", True),
                catch_up=entry.get("catch_up", CatchUp.LATEST), source="settings",
            )  # fmt: skip
    return declared, problems


def _entry_problems(entry: Mapping[str, Any]) -> list[str]:
    from .registry import find_task

    problems = []
    unknown = sorted(set(entry) - _KEYS)
    if unknown:
        problems.append(
            f"unknown key(s) {', '.join(unknown)}; the keys are {', '.join(sorted(_KEYS))}"
        )
    task = find_task(entry.get("task"))  # type: ignore[arg-type]
    if task is None:
        problems.append(
            f"task {entry.get('task')!r} is not registered (give the task's dotted name, as "
            f"stored in Job.task_name; is its module imported?)"
        )
    problems += [p for p in (cron_problem(entry.get("cron")),) if p]
    problems += [p for p in (timezone_problem(entry.get("timezone", "UTC")),) if p]
    queue = entry.get("queue")
    if queue is not None and queue not in conf.QUEUES:
        problems.append(f"queue {queue!r} is not one of WORKQUEUE['QUEUES'] {list(conf.QUEUES)}")
    if entry.get("catch_up", CatchUp.LATEST) not in CatchUp.values:
        problems.append(f"catch_up must be one of {', '.join(CatchUp.values)}")
    if not isinstance(entry.get("enabled", True), bool):
        problems.append("enabled must be True or False")
    args, kwargs = entry.get("args", []), entry.get("kwargs", {})
    if not isinstance(args, list | tuple) or not isinstance(kwargs, Mapping):
        problems.append("args must be a list and kwargs a dict")
    else:
        try:
            json.dumps([list(args), dict(kwargs)])
        except (TypeError, ValueError) as exc:
            problems.append(f"args and kwargs must be JSON: {exc}")
        else:
            if task is not None:
                try:
                    task.spec.check_arguments(list(args), dict(kwargs))
                except Exception as exc:
                    problems.append(str(exc))
    return problems


def sync_schedules(alias: str | None = None) -> int:
    """Upsert the declared schedules into the ``Schedule`` table; return how many rows were
    created or changed. A row whose cron or time zone changed gets a new next tick; otherwise
    its next tick is kept, so ticks missed while no worker ran are caught up."""
    from .db import driver_for
    from .models import Schedule

    alias = alias or conf.DATABASE
    declared = declared_schedules()
    changed = 0
    with transaction.atomic(using=alias):
        now = driver_for(alias).now()
        rows = Schedule.objects.using(alias)
        stale = rows.filter(source__in=("settings", "task")).exclude(name__in=list(declared))
        changed += stale.delete()[1].get(Schedule._meta.label, 0)
        existing = {
            row.name: row for row in rows.select_for_update().filter(name__in=list(declared))
        }
        for entry in declared.values():
            owned = dict(
                task_name=entry.task_name, cron=entry.cron, timezone=entry.timezone,
                args=entry.args, kwargs=entry.kwargs, queue=entry.queue,
                catch_up=entry.catch_up, source=entry.source,
            )  # fmt: skip
            row = existing.get(entry.name)
            if row is None:
                next_run_at = next_tick(entry.cron, entry.timezone, now)
                rows.create(
                    name=entry.name, enabled=entry.enabled, next_run_at=next_run_at, **owned
                )
                changed += 1
                continue
            updates: dict[str, Any] = {
                key: value for key, value in owned.items() if getattr(row, key) != value
            }
            if not entry.enabled and row.enabled:
                updates["enabled"] = False
            if "cron" in updates or "timezone" in updates or row.next_run_at is None:
                updates["next_run_at"] = next_tick(entry.cron, entry.timezone, now)
            if updates:
                rows.filter(pk=row.pk).update(**updates, updated_at=Now())
                changed += 1
    if changed:
        logger.info("synced %d schedule(s) from the settings and @task(cron=...)", changed)
    return changed
