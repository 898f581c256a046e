"""``workqueue import-django-tasks-db``: django-tasks-db's queued rows become jobs, each once."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import django
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_workqueue.models import AuditRecord, Job
from django_workqueue.states import Status
from tests.support.django_tasks_db_twin.models import DBTaskResult

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks is Django 6's"),
]

ADD = "tests.support.django_tasks.add"
SEND = "tests.support.django_tasks.send"
WHENEVER = datetime(9999, 1, 1, tzinfo=UTC)  # django-tasks-db's "no run_after"


@pytest.fixture(autouse=True)
def tasks() -> Any:
    """The project's django.tasks tasks, defined (as a project's tasks.py is at start-up)."""
    from tests.support import django_tasks

    return django_tasks


def row(path: str = ADD, *args: Any, **fields: Any) -> DBTaskResult:
    values = {"status": "READY", "backend_name": "default", "run_after": WHENEVER,
              "args_kwargs": {"args": list(args), "kwargs": {}}, **fields}  # fmt: skip
    return DBTaskResult(task_path=path, **values)


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("workqueue", "import-django-tasks-db", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_ten_thousand_queued_rows_move_each_once() -> None:
    DBTaskResult.objects.bulk_create([row(ADD, i, 1) for i in range(10_000)], batch_size=2000)
    later = timezone.now() + timedelta(hours=1)
    mail = row(SEND, "a@example.com", queue_name="mail", priority=7, run_after=later)
    running = row(ADD, 0, 0, status="RUNNING", worker_ids=["gone"])
    finished = row(ADD, 0, 0, status="SUCCESSFUL", return_value=0)
    DBTaskResult.objects.bulk_create([mail, running, finished])
    queued = set(DBTaskResult.objects.filter(status="READY").values_list("pk", flat=True))

    out, _ = run("--dry-run")
    assert out.splitlines()[0] == "would move 10001 django-tasks-db row(s) into jobs"
    assert not Job.objects.exists() and DBTaskResult.objects.count() == 10_003

    out, err = run()

    assert out.splitlines()[0] == "moved 10001 django-tasks-db row(s) into jobs"
    assert f"  {ADD}: 10000" in out and f"  {SEND}: 1" in out
    assert "1 RUNNING row(s) not moved: django-tasks-db records no worker liveness" in err
    keys = list(Job.objects.values_list("unique_key", flat=True))
    assert len(keys) == len(set(keys)) == 10_001
    assert {key.removeprefix("django-tasks-db:") for key in keys} == {str(pk) for pk in queued}
    assert set(DBTaskResult.objects.values_list("status", flat=True)) == {"RUNNING", "SUCCESSFUL"}
    moved_mail = Job.objects.get(unique_key=f"django-tasks-db:{mail.pk}")
    assert (moved_mail.task_name, moved_mail.queue, moved_mail.priority) == (SEND, "mail", 7)
    assert (moved_mail.status, moved_mail.run_after) == (Status.SCHEDULED, later)
    assert moved_mail.args == ["a@example.com"]
    one = Job.objects.get(unique_key=f"django-tasks-db:{min(queued)}")
    assert (one.task_name, one.queue, one.status) == (ADD, "default", Status.READY)
    assert AuditRecord.objects.get(action="import-django-tasks-db").changed == 10_001

    with pytest.raises(CommandError, match="nothing to move") as again:
        run()  # a second run moves nothing
    assert again.value.returncode == 1
    assert Job.objects.count() == 10_001

    out, _ = run("--include-running", "--json")  # every db_worker is stopped now
    assert json.loads(out)["by_task"] == {ADD: 1}
    assert Job.objects.get(unique_key=f"django-tasks-db:{running.pk}").args == [0, 0]
    assert list(DBTaskResult.objects.values_list("status", flat=True)) == ["SUCCESSFUL"]


def test_a_moved_row_runs_as_its_django_task(tasks: Any) -> None:
    from django_workqueue.testing import drain

    queued = row(ADD, 2, 3)
    queued.save()
    run()

    drain()

    job = Job.objects.get(unique_key=f"django-tasks-db:{queued.pk}")
    result = tasks.add.get_result(str(job.pk))
    assert (result.status, result.return_value) == ("SUCCESSFUL", 5)


def test_rows_of_a_task_this_project_cannot_run_move_nothing() -> None:
    DBTaskResult.objects.bulk_create([row(ADD, 1, 2), row("shop.tasks.gone"),
                                      row(ADD, 1, 2, queue_name="nowhere")])  # fmt: skip

    with pytest.raises(CommandError) as refused:
        run()

    assert refused.value.returncode == 2
    message = str(refused.value)
    assert message.startswith("nothing moved: shop.tasks.gone is not a django.tasks task this ")
    assert f"{ADD} (queue 'nowhere'): Queue 'nowhere' is not valid for backend." in message
    assert not Job.objects.exists() and DBTaskResult.objects.count() == 3
