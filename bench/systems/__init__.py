"""The systems compared: this project (PostgreSQL and SQLite) and three PostgreSQL peers."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Options, System

# name -> (module, adapter class). Modules import their library only inside client functions.
MODULES = {
    "workqueue": ("bench.systems.workqueue", "Workqueue"),
    "workqueue_sqlite": ("bench.systems.workqueue", "WorkqueueSQLite"),
    "wq_engine": ("bench.systems.workqueue_engine", "WorkqueueEngine"),
    "wq_engine_sqlite": ("bench.systems.workqueue_engine", "WorkqueueEngineSQLite"),
    "pgqueuer": ("bench.systems.pgqueuer_peer", "PgQueuer"),
    "procrastinate": ("bench.systems.procrastinate_peer", "Procrastinate"),
    "django_tasks_db": ("bench.systems.django_tasks_db_peer", "DjangoTasksDB"),
}
PEERS = ("pgqueuer", "procrastinate", "django_tasks_db")


def load(name: str, options: Options) -> System:
    module, cls = MODULES[name]
    return getattr(importlib.import_module(module), cls)(options)
