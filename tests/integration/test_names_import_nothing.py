"""No code path imports a module because a request, a job row or an argument named it: a task
is found by a look-up in the registry that start-up filled, and a name it does not hold is an
unknown task on every surface (the API, the worker, ``run_job``, schedules, results)."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

import django
import pytest

from django_workqueue import operations, signals
from django_workqueue.exceptions import TaskNotRegistered
from django_workqueue.models import Job, Schedule
from django_workqueue.registry import find_task
from django_workqueue.states import Status
from django_workqueue.testing import run_job
from tests.support.factories import JobFactory
from tests.support.imports import NAMED_MODULE, never_imported

pytestmark = pytest.mark.django_db(transaction=True)

HAS_API = all(importlib.util.find_spec(name) for name in ("rest_framework", "drf_spectacular"))
needs_api = pytest.mark.skipif(not HAS_API, reason="the API extra (DRF) is not installed")
needs_django_tasks = pytest.mark.skipif(
    django.VERSION < (6, 0), reason="django.tasks needs Django 6.0+"
)
# Names of what importing would reach: the module, a Django task in it, another attribute.
NAMES = [NAMED_MODULE, f"{NAMED_MODULE}.run_me", f"{NAMED_MODULE}.COUNTER"]
NOT_REGISTERED = "TaskNotRegistered"


def _post(task_name: str) -> Any:
    from tests.support.api import API, client_as

    return client_as("superuser").post(f"{API}jobs/", {"task": task_name}, format="json")


@pytest.mark.parametrize("name", NAMES)
def test_the_registry_look_up_imports_nothing(name: str) -> None:
    with never_imported(NAMED_MODULE):
        assert find_task(name) is None


@needs_api
@pytest.mark.parametrize("name", NAMES)
def test_an_api_enqueue_naming_a_module_is_a_400_and_imports_nothing(name: str) -> None:
    with never_imported(NAMED_MODULE):
        response = _post(name)
    assert response.status_code == 400, response.content
    assert f"no task the API may enqueue is registered as {name!r}" in response.json()["task"]
    assert not Job.objects.exists()


@needs_api
def test_an_api_enqueue_naming_a_module_that_exits_on_import_is_a_400(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Importing unittest.__main__ runs unittest.main(), which raises SystemExit: give it
    # arguments it refuses at once, so that a failing run of this test ends quickly.
    monkeypatch.setattr(sys, "argv", ["python -m unittest", "--no-such-option"])
    with never_imported("unittest.__main__"):
        response = _post("unittest.__main__.main")
    assert response.status_code == 400, response.content
    assert "unittest.__main__.main" in response.json()["task"]


@needs_api
def test_an_unknown_task_and_a_task_without_api_true_get_the_same_answer() -> None:
    # The answer does not tell a caller which non-API tasks exist.
    unknown = _post("nowhere.task").json()["task"]
    hidden = _post("testproject.testapp.tasks.add").json()["task"]
    assert unknown.replace("nowhere.task", "X") == hidden.replace(
        "testproject.testapp.tasks.add", "X"
    )
    assert "@task(api=True)" in unknown


@pytest.mark.parametrize("name", NAMES)
def test_a_worker_fails_a_job_naming_a_module_as_not_registered_without_importing_it(
    drain: Any, name: str
) -> None:
    failed: list[Any] = []

    def record(sender: Any, **kwargs: Any) -> None:
        failed.append(sender)

    signals.job_failed.connect(record, weak=False)  # the signals' look-up of the sender too
    try:
        with never_imported(NAMED_MODULE):
            job = JobFactory(task_name=name, args=[], max_attempts=1)
            drain()
    finally:
        signals.job_failed.disconnect(record)
    job.refresh_from_db()
    assert job.status == Status.FAILED
    assert [entry["type"].rsplit(".", 1)[-1] for entry in job.errors] == [NOT_REGISTERED]
    assert failed == [None]  # no task is the sender


def test_run_job_fails_a_job_naming_a_module_without_importing_it() -> None:
    with never_imported(NAMED_MODULE):
        job = run_job(JobFactory(task_name=f"{NAMED_MODULE}.run_me", args=[], max_attempts=1))
    assert job.status == Status.FAILED
    assert NOT_REGISTERED in job.errors[-1]["type"]


def test_a_schedule_naming_a_module_runs_nothing_and_imports_nothing() -> None:
    Schedule.objects.create(
        name="named", task_name=f"{NAMED_MODULE}.run_me", cron="* * * * *", source="runtime"
    )
    with never_imported(NAMED_MODULE), pytest.raises(TaskNotRegistered):
        operations.run_schedule_now("named")
    assert not Job.objects.exists()


@needs_django_tasks
def test_a_result_of_a_job_naming_a_module_does_not_exist_and_imports_nothing() -> None:
    from django.tasks import default_task_backend
    from django.tasks.exceptions import TaskResultDoesNotExist

    job = JobFactory(task_name=f"{NAMED_MODULE}.run_me")
    with never_imported(NAMED_MODULE), pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(job.pk))
