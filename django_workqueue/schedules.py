"""Cron schedules: their declarations (``WORKQUEUE["SCHEDULES"]`` and ``@task(cron=...)``),
their validation, their ticks, and their sync into the ``Schedule`` table.

Ticks are computed by ``cron.py`` (croniter's, in the schedule's time zone, stored in UTC;
re-exported here). A worker syncs the declarations at
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
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models.functions import Now

from .conf import workqueue_settings as conf
from .cron import cron_problem, latest_tick, next_tick, timezone_problem
from .db import driver_for
from .models import Schedule
from .registry import find_task, registered_tasks
from .states import CatchUp

__all__ = [
    "Declared", "cron_problem", "declared_schedules", "latest_tick", "next_tick",
    "schedule_problems", "sync_schedules", "timezone_problem",
]  # fmt: skip

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
