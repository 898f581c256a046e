"""The package imports on every platform, the process pool only runs on POSIX systems and says so
(its children are started with inherited sockets, sessions and POSIX signals)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core.management import CommandError

from django_workqueue.management.commands.runworker import pool_options
from django_workqueue.worker import processes

ROOT = Path(__file__).resolve().parents[2]


def test_the_worker_and_runworker_import_where_posix_signals_are_missing():
    """Windows has no SIGHUP (nor SIGKILL): importing the worker must not need them."""
    script = textwrap.dedent(
        """
        import signal
        for name in ("SIGHUP", "SIGKILL"):
            delattr(signal, name)
        import django
        django.setup()
        import django_workqueue.management.commands.runworker
        import django_workqueue.worker.processes
        import django_workqueue.worker.runner
        """
    )
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="testproject.settings", PYTHONPATH=str(ROOT))
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr


def test_the_process_pool_is_refused_off_posix_naming_the_thread_pool(
    monkeypatch: pytest.MonkeyPatch,
):
    monkeypatch.setattr(processes, "POSIX", False)  # as on Windows

    with pytest.raises(CommandError, match=r"--pool processes: .*POSIX.*--pool threads"):
        pool_options({"pool": "processes"}, ["default"])
