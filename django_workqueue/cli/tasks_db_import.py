"""``manage.py workqueue import-django-tasks-db``: move the work a django-tasks-db project has
queued (its ``DBTaskResult`` rows) into django-workqueue's jobs, so that a project can switch
its ``TASKS`` backend with work waiting.

A row is moved once: its job is inserted and the row deleted in one transaction (when both
live in one database), so a second run finds nothing to move. Each job carries the row's id as
its ``unique_key`` (``django-tasks-db:<uuid>``): a run that died between the insert and the
delete (two databases), or two runs at once, cannot make a second job while the first is
waiting. Rows are moved in batches, each one multi-row INSERT per task and queue.

django-tasks-db keeps no record of its workers' liveness (a row names the ids of the workers
that claimed it, nothing says whether they still run): a ``RUNNING`` row may be running right
now in a live ``db_worker``. They are moved only with ``include_running``, which the operator
gives once every ``db_worker`` is stopped; their job starts again from the beginning.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import router, transaction
from django.db.models import Count

from .. import django_tasks
from ..conf import workqueue_settings as conf
from ..discovery import import_urlconf

SOURCE_APP, SOURCE_MODEL = "django_tasks_database", "DBTaskResult"
KEY_PREFIX = "django-tasks-db:"
BATCH_SIZE = 1000
# django-tasks-db stores "no run_after" as this far-away date (its get_date_max()).
_NO_RUN_AFTER_YEAR = 9999


class ImportRefused(Exception):
    """The move cannot be done as asked; the message names the problem and the fix."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ImportReport:
    dry_run: bool
    moved: int
    by_task: dict[str, int]
    running_left: int
    """RUNNING rows not moved (without ``include_running``)."""


def source_model() -> Any:
    """django-tasks-db's ``DBTaskResult``, or ``ImportRefused`` if it is not installed."""
    try:
        return apps.get_model(SOURCE_APP, SOURCE_MODEL)
    except LookupError:
        raise ImportRefused(
            "django-tasks-db is not installed (no app 'django_tasks_database'): keep "
            "'django_tasks_db' in INSTALLED_APPS until its rows are moved, then remove it"
        ) from None


def import_rows(*, dry_run: bool, include_running: bool = False) -> ImportReport:
    """Move the READY rows (and the RUNNING ones with ``include_running``) into jobs."""
    model = source_model()
    import_urlconf()  # the tasks the views' modules define, as a worker finds them
    statuses = ["READY", "RUNNING"] if include_running else ["READY"]
    rows = model._default_manager.using(router.db_for_write(model))
    running_left = 0 if include_running else rows.filter(status="RUNNING").count()
    pending = rows.filter(status__in=statuses).order_by("enqueued_at", "pk")
    by_task: Counter[str] = Counter()
    resolved: dict[tuple[str, str, str, int], Any] = {}
    problems: dict[str, str] = {}
    # A first pass resolves every task before anything moves: a project that removed or
    # renamed a task, or whose TASKS does not run it here, changes nothing.
    for path, backend, queue, priority in (
        pending.order_by()
        .values_list("task_path", "backend_name", "queue_name", "priority")
        .distinct()
    ):
        try:
            resolved[(path, backend, queue, priority)] = _engine_task(
                path, backend, queue, priority
            )
        except ImportRefused as exc:
            problems.setdefault(path, str(exc))
    if problems:
        raise ImportRefused(
            "nothing moved: " + "; ".join(problems[path] for path in sorted(problems))
        )
    if dry_run:
        for path, count in pending.order_by().values_list("task_path").annotate(Count("pk")):
            by_task[path] = count
        return ImportReport(dry_run=True, moved=sum(by_task.values()), by_task=dict(by_task),
                            running_left=running_left)  # fmt: skip
    while True:
        with transaction.atomic(using=rows.db), transaction.atomic(using=conf.DATABASE):
            batch = list(pending.select_for_update(skip_locked=True)[:BATCH_SIZE])
            if not batch:
                break
            _move(batch, resolved, by_task)
            rows.filter(pk__in=[row.pk for row in batch]).delete()
    return ImportReport(dry_run=False, moved=sum(by_task.values()), by_task=dict(by_task),
                        running_left=running_left)  # fmt: skip


def _engine_task(path: str, backend: str, queue: str, priority: int) -> Any:
    """Our task for rows of ``path`` enqueued to ``backend``'s ``queue`` at ``priority``."""
    from django.tasks.exceptions import InvalidTask  # django.tasks: Django 6.0+ only

    # Looked up, never imported by the row's name: a row is data (tests/unit/
    # test_no_import_by_name.py); the project's tasks are defined at start-up.
    task = django_tasks.django_task_of(path)
    if task is None:
        raise ImportRefused(
            f"{path} is not a django.tasks task this project defines at start-up (in an "
            f"installed app's tasks.py, WORKQUEUE['TASK_MODULES'] or the URLconf's modules)"
        )
    try:
        task = task.using(backend=backend, queue_name=queue, priority=priority)
        ours = task.get_backend()
        if not getattr(ours, "runs_on_workqueue", False):
            raise ImportRefused(
                f"{path}: TASKS[{backend!r}] does not run on "
                f"django_workqueue.backend.WorkqueueBackend yet; switch its BACKEND first"
            )
        return ours.engine_task(task)  # type: ignore[attr-defined]
    except InvalidTask as exc:
        raise ImportRefused(f"{path} (queue {queue!r}): {exc}") from None


def _move(batch: list[Any], resolved: dict[tuple[str, str, str, int], Any], by_task: Any) -> None:
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for row in batch:
        key = (row.task_path, row.backend_name, row.queue_name, row.priority, _run_after(row))
        groups.setdefault(key, []).append(row)
    for (path, backend, queue, priority, run_after), rows in groups.items():
        task = resolved[(path, backend, queue, priority)]
        if run_after is not None:
            task = task.using(run_at=run_after)
        task.enqueue_many([
            (row.args_kwargs["args"], row.args_kwargs["kwargs"], f"{KEY_PREFIX}{row.pk}")
            for row in rows
        ])  # fmt: skip
        by_task[path] += len(rows)


def _run_after(row: Any) -> datetime | None:
    """The row's ``run_after``, None for django-tasks-db's "whenever" (year 9999)."""
    return None if row.run_after.year == _NO_RUN_AFTER_YEAR else row.run_after
