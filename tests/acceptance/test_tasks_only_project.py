"""A project whose only configuration is TASKS enqueues to two queues, runs runworker and reads
its results as django.tasks gives them."""

from __future__ import annotations

import json
from collections.abc import Callable

import django
import pytest

from tests.support.processes import run_manage

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(django.VERSION < (6, 0), reason="TASKS is Django 6's"),
]
SETTINGS = ("--settings", "tests.acceptance.settings_tasks_only")
TASKS = "from tests.support.django_tasks_app.tasks import multiply, refuse; import json; "


def shell(code: str, env: dict[str, str]) -> str:
    completed = run_manage(["shell", *SETTINGS, "-c", TASKS + code], env)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout.strip().splitlines()[-1]


def test_a_tasks_only_project_runs_two_queues_and_reads_the_results(
    worker_env: Callable[..., dict[str, str]],
) -> None:
    env = worker_env()
    ids = json.loads(shell(
        "print(json.dumps([multiply.using(queue_name='emails').enqueue(6, 7).id, "
        "refuse.enqueue('no').id]))", env,
    ))  # fmt: skip

    worker = run_manage(["runworker", "--burst", *SETTINGS], env)

    assert worker.returncode == 0, worker.stderr
    read = shell(
        f"ok = multiply.get_result({ids[0]!r}); bad = refuse.get_result({ids[1]!r}); "
        "print(json.dumps([ok.status, ok.return_value, bad.status, "
        "bad.errors[0].exception_class_path, bad.finished_at is not None]))", env,
    )  # fmt: skip
    assert json.loads(read) == ["SUCCESSFUL", 42, "FAILED", "builtins.ValueError", True]
