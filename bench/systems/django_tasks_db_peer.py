"""django-tasks-db: the database backend of django-tasks, worked by ``manage.py db_worker``.

It has no bulk enqueue (Django's Task API enqueues one at a time) and no LISTEN/NOTIFY: an
idle ``db_worker`` polls every ``--interval`` seconds, set here to the same poll interval as
django-workqueue's. ``--batch`` makes it exit once the queue is empty.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from .. import pgadmin
from ..bootstrap import ROOT
from .base import System


class DjangoTasksDB(System):
    name = "django_tasks_db"
    label = "django-tasks-db"
    table_prefix = "django_tasks_database_"
    unfinished_sql = (
        "SELECT count(*) FROM django_tasks_database_dbtaskresult WHERE status <> 'SUCCESSFUL'"
    )
    has_bulk = False
    single_api = "noop.enqueue(i)"

    def system_env(self) -> dict[str, str]:
        return {
            "DJANGO_SETTINGS_MODULE": "bench.peers.dtdb_settings",
            "DATABASE_URL": pgadmin.url(self.database),
        }

    def install(self) -> None:
        import subprocess

        subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), "migrate", "--verbosity", "0"],
            env=self.env(), cwd=ROOT, check=True,
        )  # fmt: skip

    def worker_command(self, setting: dict[str, Any], *, burst: bool) -> list[str]:
        command = [sys.executable, str(ROOT / "manage.py"), "db_worker", "--no-startup-delay",
                   "--no-reload", "--verbosity", "0",
                   "--interval", str(self.options.poll_interval)]  # fmt: skip
        return [*command, "--batch"] if burst else command

    def describe(self, setting: dict[str, Any]) -> str:
        return "one task at a time (no concurrency option)"


def _noop() -> Any:
    import django

    django.setup()
    from bench.peers.dtdb_tasks import noop

    return noop


def client_enqueue_single(n: int) -> float:
    noop = _noop()
    noop.enqueue(-1)
    started = time.perf_counter()
    for key in range(n):
        noop.enqueue(key)
    return n / (time.perf_counter() - started)


def client_fill(n: int) -> int:
    """No bulk API: one enqueue per job, inside one transaction to keep the fill short."""
    from django.db import transaction

    noop = _noop()
    with transaction.atomic():
        for key in range(n):
            noop.enqueue(key)
    return n


def client_latency(n: int, gap: float, stamp_file: str) -> list[float]:
    from bench.latency import measure

    noop = _noop()
    return measure(noop.enqueue, n, gap, Path(stamp_file))
